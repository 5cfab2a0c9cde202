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

/// `message Item { optional int64 n = 1; }` and `message List { repeated Item items = 1; }`.
#[derive(Debug, Default, tensorfmt_protobuf::View)]
#[view(name = "Item", crate = "tensorfmt_protobuf")]
struct Item<'a> {
    #[view(span)]
    span: tensorfmt_protobuf::Span<'a>,
    #[view(1, varint)]
    n: Option<i64>,
}

#[derive(Debug, Default, tensorfmt_protobuf::View)]
#[view(name = "List", crate = "tensorfmt_protobuf")]
struct List<'a> {
    #[view(span)]
    span: tensorfmt_protobuf::Span<'a>,
    #[view(1, message, repeated)]
    items: Vec<Item<'a>>,
}

/// The items of a repeated message field are views of a few bytes of input each (two for
/// an empty message): at most `Limits::max_tensors` are read, the one past them refused
/// where it is.
#[test]
fn repeated_messages_are_bounded_as_they_are_read() {
    let msg = [0x0a, 0x00].repeat(5);
    let limits = |n| tensorfmt_core::Limits {
        max_tensors: n,
        ..Default::default()
    };
    let list: List<'_> = tensorfmt_protobuf::read(&msg, 0, 0, &limits(5)).unwrap();
    assert_eq!(list.items.len(), 5);
    assert_eq!((list.span.bytes.len(), list.items[4].span.base), (10, 10));
    assert_eq!(list.items[0].n, None);
    let e = tensorfmt_protobuf::read::<List<'_>>(&msg, 100, 0, &limits(4)).unwrap_err();
    assert!(
        matches!(
            e.kind,
            tensorfmt_core::ErrorKind::Limit {
                limit: 4,
                actual: 5,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.location.offset, Some(108));
    assert_eq!(e.location.field.as_deref(), Some("List.items"));
}
