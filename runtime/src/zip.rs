//! The zip engine: an index of members with the absolute offsets of their data (so stored
//! members can be memory-mapped), member content access, and a streaming writer.

/// How a member's content is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// Method 0: stored plain.
    Stored,
    /// Method 8: raw deflate.
    Deflate,
}

/// One member of a zip archive, as its central directory describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZipMember {
    /// The member's name.
    pub name: String,
    /// Absolute offset of the member's (compressed) data in the archive.
    pub data_offset: u64,
    /// Size of the compressed data.
    pub compressed_size: u64,
    /// Size of the uncompressed content.
    pub size: u64,
    /// Compression method.
    pub compression: Compression,
    /// CRC-32 of the uncompressed content.
    pub crc32: u32,
}
