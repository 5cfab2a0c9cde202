//! Detection of a pickle of some calls by its first bytes, reading nothing beyond them.

use tensorfmt_core::source::Source;

use crate::rules::Rules;

/// True when `src` starts as a pickle stream — `PROTO` 2 to 5 followed by anything but
/// a `LONG1` (how PyTorch's legacy format starts: a pickled magic number), or a protocol
/// 0 or 1 opening opcode (`(`, `}`, `]`, `c`) — and its first `window` bytes name one of
/// the calls `rules` record ([`Rules::calls`]), as `GLOBAL` writes it (`module\nname\n`)
/// or `STACK_GLOBAL` (the two strings, module first).
pub fn starts_naming(src: &Source, window: u64, rules: &Rules) -> bool {
    let n = src.data().len().min(window);
    let Ok(n) = usize::try_from(n) else {
        return false;
    };
    let mut buf = vec![0u8; n];
    if n < 4 || src.data().read_exact_at(0, &mut buf).is_err() {
        return false;
    }
    let starts = match buf[0] {
        0x80 => (2..=5).contains(&buf[1]) && buf[2] != 0x8a,
        b'(' | b'}' | b']' | b'c' => true,
        _ => false,
    };
    starts
        && rules.calls().any(|(module, name)| {
            let global = format!("{module}\n{name}\n");
            contains(&buf, global.as_bytes())
                || find(&buf, module.as_bytes())
                    .is_some_and(|at| contains(&buf[at + module.len()..], name.as_bytes()))
        })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    find(hay, needle).is_some()
}
