//! A tensor's bytes as the values of a repeated field of a protobuf message
//! ([`FieldValues`]: ONNX's and Caffe2's typed data fields), decoded element by element
//! as the core reads them through [`Encoded`].

use tensorfmt_core::error::{ErrorKind, Result};
use tensorfmt_core::read::{chunk_size, to_usize, ReadOptions};
use tensorfmt_core::sink::Sink;
use tensorfmt_core::source::{check_range, RandomAccess, Source};
use tensorfmt_core::tensor::{DataLocation, Encoded, EncodedBytes, TensorInfo};

use crate::{decode_elements, Elements};

/// The values of field `number` of the message at `offset` (`message_len` bytes long),
/// which make `len` bytes of elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldValues {
    /// Absolute offset of the message in the container.
    pub offset: u64,
    /// The message's length.
    pub message_len: u64,
    /// The field number.
    pub number: u32,
    /// How its values become elements.
    pub elements: Elements,
    /// Number of element bytes they make.
    pub len: u64,
}

impl FieldValues {
    /// These values, all `len` bytes of them, as a tensor's [`DataLocation`].
    pub fn location(self) -> DataLocation {
        let len = self.len;
        EncodedBytes::new(self).window(0, 0, len)
    }
}

impl Encoded for FieldValues {
    fn plain_offset(&self, _: &dyn RandomAccess, _: u64) -> Result<Option<u64>> {
        Ok(None)
    }

    fn read(
        &self,
        src: &Source,
        _: &TensorInfo,
        _: u64,
        window: (u64, u64),
        sink: &mut dyn Sink,
        opts: &ReadOptions,
    ) -> Result<()> {
        read_field(src, self, window, sink, opts)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn same(&self, other: &dyn Encoded) -> bool {
        other.as_any().downcast_ref::<FieldValues>() == Some(self)
    }
}

/// Decodes the elements of the field and pushes them: the window must be the whole
/// field (its values are decoded front to back), of exactly the bytes they make.
fn read_field(
    src: &Source,
    f: &FieldValues,
    (skip, len): (u64, u64),
    sink: &mut dyn Sink,
    opts: &ReadOptions,
) -> Result<()> {
    let FieldValues {
        offset,
        message_len,
        number,
        elements,
        ..
    } = *f;
    if skip != 0 {
        return Err(ErrorKind::Unsupported(format!(
            "a tensor starting {skip} bytes into the values of field {number}"
        ))
        .into());
    }
    let data = src.data();
    check_range(offset, message_len, data.len())?;
    let owned;
    let message: &[u8] = match data.as_slice() {
        Some(s) => &s[offset as usize..(offset + message_len) as usize],
        None => {
            let mut v = vec![0u8; to_usize(message_len, "message")?];
            data.read_exact_at(offset, &mut v)?;
            owned = v;
            &owned
        }
    };
    let produced = decode_elements(
        message,
        offset,
        number,
        elements,
        chunk_size(opts),
        &mut |b| sink.chunk(b),
    )?;
    if produced != len {
        return Err(ErrorKind::SizeMismatch(format!(
            "field {number} holds {produced} bytes of elements, the tensor needs {len}"
        ))
        .into());
    }
    Ok(())
}
