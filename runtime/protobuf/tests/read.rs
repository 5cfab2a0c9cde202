//! A tensor held as the values of a protobuf repeated field, read through the core's
//! `read_tensor`.

use tensorfmt_core::read::{read_tensor, ReadOptions};
use tensorfmt_core::sink::OwnedSink;
use tensorfmt_core::{ByteOrder, DType, Order, Source, TensorInfo};
use tensorfmt_protobuf::{put_len_header, put_varint, Elements, FieldValues};

#[test]
fn protobuf_fields_are_decoded_into_elements() {
    // A message at offset 3 of the file: field 5 packs four f16 bit patterns as
    // varints (as ONNX's int32_data does).
    let halves = [0x3c00u16, 0xc000, 0x0001, 0x7bff];
    let mut packed = Vec::new();
    for h in halves {
        put_varint(&mut packed, h as u64);
    }
    let mut msg = Vec::new();
    put_len_header(&mut msg, 5, packed.len() as u64);
    msg.extend_from_slice(&packed);
    let mut file = b"abc".to_vec();
    file.extend_from_slice(&msg);
    let want: Vec<u8> = halves.iter().flat_map(|h| h.to_le_bytes()).collect();
    let mut info = TensorInfo::dense(
        "h",
        DType::F16,
        vec![4],
        Order::C,
        ByteOrder::Little,
        FieldValues {
            offset: 3,
            message_len: msg.len() as u64,
            number: 5,
            elements: Elements::Varint { width: 2 },
            len: 8,
        }
        .location(),
    )
    .unwrap();
    for src in [
        Source::from_bytes(file.clone()),
        Source::from_reader(std::io::Cursor::new(file.clone())).unwrap(),
    ] {
        let mut s = OwnedSink::default();
        read_tensor(&src, &info, &mut s, &ReadOptions::default()).unwrap();
        assert_eq!(s.tensors[0].data.as_bytes(), &want[..]);
    }
    // The field holding other than the tensor's bytes: an error naming the tensor.
    let mut field = *info.location.encoded::<FieldValues>().unwrap().0;
    field.elements = Elements::Varint { width: 1 };
    info.location = field.location();
    let e = read_tensor(
        &Source::from_bytes(file),
        &info,
        &mut OwnedSink::default(),
        &ReadOptions::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("'h'"), "{e}");
}
