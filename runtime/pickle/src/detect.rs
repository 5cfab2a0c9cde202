//! Detection of a pickle of some calls by its first bytes, reading nothing beyond them.

use memchr::memmem;
use tensorfmt_core::source::Source;

use crate::rules::Rules;

/// True when `src` starts as a pickle stream ([`starts_as_pickle`]) and its first
/// `window` bytes name one of the calls `rules` record ([`Rules::calls`]), as `GLOBAL`
/// writes it (`module\nname\n`) or `STACK_GLOBAL` (the two strings, module first):
/// [`names_global`].
pub fn starts_naming(src: &Source, window: u64, rules: &Rules) -> bool {
    let n = src.data().len().min(window);
    let Ok(n) = usize::try_from(n) else {
        return false;
    };
    let mut buf = vec![0u8; n];
    if n < 4 || src.data().read_exact_at(0, &mut buf).is_err() {
        return false;
    }
    starts_as_pickle(&buf)
        && rules
            .calls()
            .any(|(module, name)| names_global(&buf, module, name))
}

/// Whether `b` starts as a pickle stream: `PROTO` 2 to 5 followed by anything but a
/// `LONG1` (how PyTorch's legacy format starts: a pickled magic number), or an opcode
/// protocols 0 and 1 open with (`(`, `}`, `]`, `c`).
pub fn starts_as_pickle(b: &[u8]) -> bool {
    match b {
        [0x80, proto, next, ..] => (2..=5).contains(proto) && *next != 0x8a,
        [b'(' | b'}' | b']' | b'c', ..] => true,
        _ => false,
    }
}

/// Whether `b` names the global `module`.`name` as `GLOBAL` or `STACK_GLOBAL` write it:
/// the module, then the name somewhere after it.
pub fn names_global(b: &[u8], module: &str, name: &str) -> bool {
    memmem::find(b, module.as_bytes())
        .is_some_and(|at| memmem::find(&b[at + module.len()..], name.as_bytes()).is_some())
}
