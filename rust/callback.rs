//! Signatures of HTTP callback ids, bit-for-bit the Awa SDK's (`awa_model::callback_contract`).
//!
//! Whoever answers a callback over HTTP proves it knows the shared secret by sending the
//! callback id's signature (the `X-Awa-Signature` header); the receiver recomputes it and
//! compares. A signature is the lowercase hex of BLAKE3's keyed hash of the callback id's
//! UTF-8 bytes under the 32-byte secret.
//!
//! The comparison is constant-time (`blake3::Hash`'s `PartialEq`), so how long a rejection
//! takes tells a forger nothing about how many leading bytes it got right. The hex is decoded
//! into a `Hash` before comparing, never compared as text: a text comparison would be neither
//! constant-time nor case-insensitive.

/// Length of the shared secret, in bytes (BLAKE3's key length).
pub const SECRET_LEN: usize = blake3::KEY_LEN;

/// The shared secret a callback id is signed with.
pub type Secret = [u8; SECRET_LEN];

/// The signature of `callback_id`: 64 lowercase hex digits.
pub fn sign(secret: &Secret, callback_id: &str) -> String {
    blake3::keyed_hash(secret, callback_id.as_bytes())
        .to_hex()
        .to_string()
}

/// Whether `signature` is 64 hex digits (either case) spelling the signature of
/// `callback_id`; anything else (other length, non-hex, empty) is simply not it.
pub fn verify(secret: &Secret, callback_id: &str, signature: &str) -> bool {
    blake3::Hash::from_hex(signature)
        .is_ok_and(|given| given == blake3::keyed_hash(secret, callback_id.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bytes(range(32))` in Python.
    fn counting() -> Secret {
        std::array::from_fn(|i| i as u8)
    }

    // Vectors from the Awa SDK (awa-pg 0.6.9, `awa.callback_contract.sign`).
    const ABC: &str = "6da54495d8152f2bcba87bd7282df70901cdb66b4448ed5f4c7bd2852b8b5532";

    #[test]
    fn signs_like_the_sdk() {
        assert_eq!(sign(&counting(), "abc"), ABC);
        assert_eq!(
            sign(&counting(), ""),
            "73492b19995d71cdb1e9d74decc09809eb732f1b00bc95c27cb15f9dd4d6478f"
        );
        assert_eq!(
            sign(&[0; SECRET_LEN], "abc"),
            "a77fc933cbb22a3738a01105ab6ec3c183b0eb0e582311f7881dd3bb8393ffa5"
        );
        assert_eq!(
            sign(&counting(), "héllo-✓-😀"),
            "c53d58580287e8bb0ac28d5220a1276dac7dbece6120dc96ab97ac8c0cf7fe39"
        );
    }

    #[test]
    fn verifies_its_own_signature_in_either_case() {
        let key = counting();
        assert!(verify(&key, "abc", ABC));
        assert!(verify(&key, "abc", &ABC.to_uppercase()));
        assert!(verify(
            &key,
            "abc",
            &format!("{}{}", &ABC[..10].to_uppercase(), &ABC[10..])
        ));
    }

    #[test]
    fn rejects_another_id_or_secret() {
        assert!(!verify(&counting(), "abd", ABC));
        assert!(!verify(&[0; SECRET_LEN], "abc", ABC));
    }

    #[test]
    fn rejects_malformed_signatures() {
        let key = counting();
        for bad in [
            "",
            &ABC[..63],
            &ABC[..62],
            &format!("{ABC}00"),
            &format!("zz{}", &ABC[2..]),
            &format!(" {ABC}"),
            &format!("{ABC}\n"),
            &format!("0x{ABC}"),
            &"é".repeat(64),
        ] {
            assert!(!verify(&key, "abc", bad), "{bad:?} accepted");
        }
    }
}
