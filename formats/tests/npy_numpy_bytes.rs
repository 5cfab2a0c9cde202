//! `.npy` headers written by the generated writer are byte-identical to `numpy.save`'s.
//! The expected bytes were recorded from NumPy 2.4 (`numpy.save` of zero arrays of each
//! dtype, order and shape; the header is everything before the data): growth-axis spare
//! spaces, 2 to 65 bytes of padding, the version.

use tensorfmt::generated::npy::{File, Header};

/// (what, descr, fortran_order, shape, NumPy's header bytes).
type Case = (
    &'static str,
    &'static str,
    bool,
    &'static [u64],
    &'static [u8],
);

const CASES: &[Case] = &[
    (
        "0-d f8",
        "<f8",
        false,
        &[],
        b"\x93NUMPY\x01\x00v\x00{'descr': '<f8', 'fortran_order': False, 'shape': (), }                                                              \x0a",
    ),
    (
        "1-d of 5, f4",
        "<f4",
        false,
        &[5],
        b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }                                                            \x0a",
    ),
    (
        "1-d of 10**7, u1",
        "|u1",
        false,
        &[10000000],
        b"\x93NUMPY\x01\x00v\x00{'descr': '|u1', 'fortran_order': False, 'shape': (10000000,), }                                                     \x0a",
    ),
    (
        "Fortran 2-d",
        "<f4",
        true,
        &[3, 4],
        b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }                                                           \x0a",
    ),
    (
        "Fortran 3-d",
        "<i2",
        true,
        &[2, 3, 1234],
        b"\x93NUMPY\x01\x00v\x00{'descr': '<i2', 'fortran_order': True, 'shape': (2, 3, 1234), }                                                     \x0a",
    ),
    (
        "empty (3, 0)",
        "<f4",
        false,
        &[3, 0],
        b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (3, 0), }                                                          \x0a",
    ),
    (
        "big-endian c16",
        ">c16",
        false,
        &[3],
        b"\x93NUMPY\x01\x00v\x00{'descr': '>c16', 'fortran_order': False, 'shape': (3,), }                                                           \x0a",
    ),
    (
        "spare crosses a block, C",
        "<f4",
        false,
        &[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 10, 100],
        b"\x93NUMPY\x01\x00\xb6\x00{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 10, 100), }                                                                                   \x0a",
    ),
    (
        "spare crosses a block, Fortran",
        "<f4",
        true,
        &[1, 1, 1, 1, 1, 1, 1, 1, 1, 10, 10, 10, 10, 10],
        b"\x93NUMPY\x01\x00\xb6\x00{'descr': '<f4', 'fortran_order': True, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1, 10, 10, 10, 10, 10), }                                                                                  \x0a",
    ),
    (
        "text ends 1 byte before the block, C",
        "<f4",
        false,
        &[100, 100, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
        b"\x93NUMPY\x01\x00\xb6\x00{'descr': '<f4', 'fortran_order': False, 'shape': (100, 100, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1), }                                                                                  \x0a",
    ),
    (
        "text ends 1 byte before the block, Fortran",
        "<f4",
        true,
        &[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 10, 100, 100],
        b"\x93NUMPY\x01\x00\xb6\x00{'descr': '<f4', 'fortran_order': True, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 10, 100, 100), }                                                                                  \x0a",
    ),
];

#[test]
fn headers_match_numpy_save() {
    for &(what, descr, fortran_order, shape, want) in CASES {
        let header = Header {
            descr: descr.to_string(),
            fortran_order,
            shape: shape.to_vec(),
        };
        let mut out = Vec::new();
        let n = File::write(&mut out, &header, tensorfmt::Payload::Bytes(&[]), 0)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(n, out.len() as u64, "{what}");
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(want),
            "{what}"
        );
        assert_eq!(out, want, "{what}");
    }
}
