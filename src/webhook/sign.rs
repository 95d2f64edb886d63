//! Standard Webhooks signatures: HMAC-SHA256 over `"{id}.{timestamp}.{body}"`
//! with the secret (the bytes after `whsec_`, base64-decoded), sent as
//! `v1,<base64>`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error(
        "the webhook secret starts with `whsec_` but the rest is not base64 ({0}); copy it again from where it was made"
    )]
    BadSecret(String),
}

/// Signs deliveries with one secret.
#[derive(Clone)]
pub struct Signer {
    key: Vec<u8>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(..)")
    }
}

impl Signer {
    pub fn new(secret: &str) -> Result<Self, SignError> {
        let key = match secret.strip_prefix("whsec_") {
            Some(encoded) => STANDARD
                .decode(encoded)
                .map_err(|e| SignError::BadSecret(e.to_string()))?,
            None => secret.as_bytes().to_vec(),
        };
        Ok(Self { key })
    }

    /// The `webhook-signature` header's value.
    pub fn sign(&self, id: &str, timestamp: i64, body: &str) -> String {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.key) else {
            // HMAC takes keys of any length; this cannot happen.
            return String::new();
        };
        mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification.
    #[test]
    fn signs_like_the_standard_webhooks_reference() {
        let signer = Signer::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let signature = signer.sign(
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            r#"{"test": 2432232314}"#,
        );
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }
}
