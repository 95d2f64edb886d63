//! Bytes as lowercase hex: content hashes (bundle identities, plugin
//! libraries, token fingerprints), keys and raw tool output. One spelling
//! for every digest the daemon shows or compares.

use sha2::{Digest, Sha256};

/// `bytes` in lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A digest as people read it (bundle identities): its first 8 bytes in hex.
pub fn short_hex(hash: &[u8]) -> String {
    hex(&hash[..hash.len().min(8)])
}

/// The whole SHA-256 of `bytes` in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings() {
        assert_eq!(hex(&[0, 255, 16]), "00ff10");
        assert_eq!(short_hex(&[1; 12]), "0101010101010101");
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
