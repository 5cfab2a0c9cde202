//! `convert`'s progress bar: on a terminal (a pseudo-terminal from util-linux `script`)
//! it shows the bytes converted out of the input's total and the rate; piped, stderr
//! carries the summary line alone.

use std::process::Command;

/// An npz of eight tensors of 2^20 f32 elements (32 MiB in all).
fn input(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("in.npz");
    let zeros = vec![0u8; 4 << 20];
    let tensors = (0..8).map(|i| {
        let meta = tensorfmt::TensorMeta {
            name: format!("t{i}"),
            dtype: tensorfmt::DType::F32,
            shape: vec![1 << 20],
            order: tensorfmt::Order::C,
            byte_order: tensorfmt::ByteOrder::Little,
        };
        (meta, &zeros[..])
    });
    tensorfmt::save(&path, None, tensors, &Default::default()).unwrap();
    path
}

#[test]
fn the_bar_shows_bytes_and_rate_on_a_terminal_and_nothing_when_piped() {
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path());
    let bin = env!("CARGO_BIN_EXE_tensorfmt");

    let out = dir.path().join("piped.safetensors");
    let piped = Command::new(bin)
        .args(["convert", input.to_str().unwrap(), out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(piped.status.success());
    let stderr = String::from_utf8(piped.stderr).unwrap();
    assert!(
        stderr.starts_with("wrote ") && !stderr.contains('\x1b'),
        "{stderr:?}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");

    let out = dir.path().join("tty.safetensors");
    let command = format!("'{bin}' convert '{}' '{}'", input.display(), out.display());
    let tty = match Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "skipped: util-linux `script` could not run ({e}), so no terminal to test on"
            );
            return;
        }
    };
    assert!(tty.status.success(), "{tty:?}");
    let text = String::from_utf8_lossy(&tty.stdout);
    assert!(text.contains("converting ["), "{text}");
    assert!(text.contains("/32.00 MiB"), "the input's total: {text}");
    assert!(text.contains("B/s"), "the rate: {text}");
    assert!(text.contains("wrote "), "{text}");
}
