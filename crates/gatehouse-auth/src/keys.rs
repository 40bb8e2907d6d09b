//! Signing keys: generation (aws-lc-rs), encryption at rest (AES-256-GCM),
//! the in-memory key ring with rotation overlap, and the JWKS document.

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::{Arc, RwLock};

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rand::SystemRandom as LcRandom;
use aws_lc_rs::signature::{
    self, ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, ED25519, EcdsaKeyPair,
    Ed25519KeyPair, KeyPair, ParsedPublicKey, RSA_PKCS1_2048_8192_SHA256, RSA_PKCS1_SHA256,
    UnparsedPublicKey,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::model::KeyRecord;
use crate::random::Random;

/// A JWS algorithm the server signs with. The server keeps a current key
/// of each ([`SigningAlg::ALL`]): access tokens use the configured one
/// (`tokens.signing_alg`), ID tokens the one their client registered
/// ([`crate::ClientRecord::id_token_alg`], RS256 by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum SigningAlg {
    /// Ed25519 (RFC 8037). The default: fastest to sign and smallest.
    #[default]
    EdDsa,
    /// ECDSA P-256 with SHA-256 (RFC 7518 §3.4).
    Es256,
    /// RSASSA-PKCS1-v1_5 with SHA-256, 2048-bit keys (RFC 7518 §3.3).
    Rs256,
}

impl SigningAlg {
    /// Every algorithm, in the order discovery lists them
    /// (`id_token_signing_alg_values_supported`): RS256 first, the one
    /// OpenID Connect Discovery §3 requires and the default of
    /// `id_token_signed_response_alg` (OpenID Connect Dynamic Client
    /// Registration §2).
    pub const ALL: [SigningAlg; 3] = [SigningAlg::Rs256, SigningAlg::EdDsa, SigningAlg::Es256];

    /// The JWS `alg` name.
    pub fn as_str(self) -> &'static str {
        match self {
            SigningAlg::EdDsa => "EdDSA",
            SigningAlg::Es256 => "ES256",
            SigningAlg::Rs256 => "RS256",
        }
    }

    /// Parses a JWS `alg` name; only the three asymmetric algorithms exist
    /// here (never `none`, never HMAC).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "EdDSA" => Some(SigningAlg::EdDsa),
            "ES256" => Some(SigningAlg::Es256),
            "RS256" => Some(SigningAlg::Rs256),
            _ => None,
        }
    }
}

/// Encrypts and decrypts private signing keys with AES-256-GCM under a key
/// derived from the server secret (`GATEHOUSE_SECRET` or the key file).
pub struct KeyCipher {
    key: LessSafeKey,
    /// HMAC-SHA256 key of the sign-in pages' CSRF tokens and consent
    /// tickets ([`KeyCipher::form_mac`]), derived from the same secret, so
    /// every instance sharing it accepts the others' forms.
    form_key: aws_lc_rs::hmac::Key,
}

impl fmt::Debug for KeyCipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyCipher(<redacted>)")
    }
}

/// PBKDF2 rounds: the secret may be a human-chosen passphrase, so the
/// derivation is slowed down; it runs once per process.
const KDF_ITERATIONS: u32 = 100_000;
const KDF_SALT: &[u8] = b"gatehouse/signing-keys/v1";

/// How a generated server secret starts ([`generate_server_secret`]): the
/// rest is 32 random bytes (base64url), which need no stretching.
pub const GENERATED_SECRET_PREFIX: &str = "ghsk1_";

/// A new random server secret for the key file or `GATEHOUSE_SECRET`:
/// [`GENERATED_SECRET_PREFIX`] and 256 random bits. [`KeyCipher`] derives
/// its key from such a secret with HKDF alone, where a passphrase costs
/// 100,000 PBKDF2 rounds (a quarter of a second of start-up).
pub fn generate_server_secret(random: &dyn Random) -> String {
    format!(
        "{GENERATED_SECRET_PREFIX}{}",
        crate::random::token_string(random, 32)
    )
}

/// The 32 random bytes of a secret made by [`generate_server_secret`];
/// `None` for anything else (a passphrase, or a key file written before
/// the prefix existed), which is stretched.
fn generated_key_bytes(secret: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let rest = secret.strip_prefix(GENERATED_SECRET_PREFIX)?;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(rest)
        .ok()
        .filter(|b| b.len() == 32)
}

/// HKDF-SHA256 (RFC 5869) of 256 random bits into the AES-256 key.
fn expand_random_key(ikm: &[u8]) -> Result<[u8; 32]> {
    struct Len;
    impl aws_lc_rs::hkdf::KeyType for Len {
        fn len(&self) -> usize {
            32
        }
    }
    let mut key = [0u8; 32];
    aws_lc_rs::hkdf::Salt::new(aws_lc_rs::hkdf::HKDF_SHA256, KDF_SALT)
        .extract(ikm)
        .expand(&[b"gatehouse/signing-keys/aes-256-gcm"], Len)
        .and_then(|okm| okm.fill(&mut key))
        .map_err(|_| Error::server("HKDF key derivation failed"))?;
    Ok(key)
}

impl KeyCipher {
    /// Derives the AES-256 key from `secret`: with HKDF from a generated
    /// secret ([`generate_server_secret`]), with PBKDF2-HMAC-SHA256 from any
    /// other (a passphrase may be guessable, so its derivation is slow).
    /// The secret must not be empty.
    pub fn from_secret(secret: &str) -> Result<Self> {
        if secret.is_empty() {
            return Err(Error::InvalidInput("the server secret is empty".into()));
        }
        let key = match generated_key_bytes(secret) {
            Some(random) => expand_random_key(&random)?,
            None => {
                let mut key = [0u8; 32];
                let iterations = NonZeroU32::new(KDF_ITERATIONS).unwrap_or(NonZeroU32::MIN);
                aws_lc_rs::pbkdf2::derive(
                    aws_lc_rs::pbkdf2::PBKDF2_HMAC_SHA256,
                    iterations,
                    KDF_SALT,
                    secret.as_bytes(),
                    &mut key,
                );
                key
            }
        };
        let unbound = UnboundKey::new(&AES_256_GCM, &key)
            .map_err(|_| Error::server("AES-256-GCM key setup failed"))?;
        // A separate key for a separate purpose: HMAC(k, label) never
        // equals k, and knowing one tells nothing of the other.
        let derived = aws_lc_rs::hmac::sign(
            &aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &key),
            b"gatehouse/forms/v1",
        );
        Ok(Self {
            key: LessSafeKey::new(unbound),
            form_key: aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, derived.as_ref()),
        })
    }

    /// HMAC-SHA256 of `msg` under the forms key, for `purpose` (bound in,
    /// so a MAC made for one purpose never passes for another).
    pub(crate) fn form_mac(&self, purpose: &str, msg: &[u8]) -> [u8; 32] {
        let mut ctx = aws_lc_rs::hmac::Context::with_key(&self.form_key);
        ctx.update(purpose.as_bytes());
        ctx.update(&[0]);
        ctx.update(msg);
        let tag = ctx.sign();
        let mut out = [0u8; 32];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// Additional data binds a sealed key to its kid and algorithm, so a
    /// ciphertext moved to another record does not open.
    fn aad(kid: &str, alg: &str) -> Vec<u8> {
        format!("gatehouse-key:{alg}:{kid}").into_bytes()
    }

    fn seal(&self, random: &dyn Random, kid: &str, alg: &str, plaintext: &[u8]) -> Result<Vec<u8>> {
        self.seal_with(random, Self::aad(kid, alg), plaintext)
    }

    /// Seals a secret that must stay recoverable (an OAuth 1.0 consumer or
    /// token secret: HMAC-SHA1 needs it in the clear). `context` names the
    /// record it belongs to and is bound as additional data, so a ciphertext
    /// copied to another record does not open.
    pub(crate) fn seal_secret(
        &self,
        random: &dyn Random,
        context: &str,
        plaintext: &[u8],
    ) -> Result<Vec<u8>> {
        self.seal_with(
            random,
            format!("gatehouse-secret:{context}").into_bytes(),
            plaintext,
        )
    }

    /// Opens what [`KeyCipher::seal_secret`] sealed for `context`.
    pub(crate) fn open_secret(&self, context: &str, sealed: &[u8]) -> Result<Vec<u8>> {
        self.open_with(format!("gatehouse-secret:{context}").into_bytes(), sealed)
            .map_err(|_| {
                Error::server(
                    "cannot decrypt a stored secret: is the server secret the one it was created with?",
                )
            })
    }

    fn seal_with(&self, random: &dyn Random, aad: Vec<u8>, plaintext: &[u8]) -> Result<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        random.fill(&mut nonce);
        let mut in_out = plaintext.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut in_out,
            )
            .map_err(|_| Error::server("sealing failed"))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&in_out);
        Ok(out)
    }

    fn open(&self, kid: &str, alg: &str, sealed: &[u8]) -> Result<Vec<u8>> {
        self.open_with(Self::aad(kid, alg), sealed).map_err(|_| {
            Error::server(format!(
                "cannot decrypt signing key {kid}: is the server secret the one it was created with?"
            ))
        })
    }

    fn open_with(&self, aad: Vec<u8>, sealed: &[u8]) -> Result<Vec<u8>> {
        let fail = || Error::server("decryption failed");
        if sealed.len() < NONCE_LEN {
            return Err(fail());
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| fail())?;
        let mut in_out = ciphertext.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(aad), &mut in_out)
            .map_err(|_| fail())?;
        Ok(plain.to_vec())
    }
}

enum PrivateKey {
    Ed(Ed25519KeyPair),
    Ec(EcdsaKeyPair),
    Rsa(signature::RsaKeyPair),
}

/// The current signing key, parsed once.
pub struct Signer {
    kid: String,
    alg: SigningAlg,
    key: PrivateKey,
    rng: LcRandom,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// The key id put in the JWS header.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The JWS algorithm.
    pub fn alg(&self) -> SigningAlg {
        self.alg
    }

    /// Signs `msg` (the JWS signing input).
    pub(crate) fn sign(&self, msg: &[u8]) -> Result<Vec<u8>> {
        match &self.key {
            PrivateKey::Ed(k) => Ok(k.sign(msg).as_ref().to_vec()),
            // RFC 7518 §3.4: the JWS form is the fixed-width R || S.
            PrivateKey::Ec(k) => k
                .sign(&self.rng, msg)
                .map(|s| s.as_ref().to_vec())
                .map_err(|_| Error::server("ES256 signing failed")),
            PrivateKey::Rsa(k) => {
                let mut sig = vec![0u8; k.public_modulus_len()];
                k.sign(&RSA_PKCS1_SHA256, &self.rng, msg, &mut sig)
                    .map_err(|_| Error::server("RS256 signing failed"))?;
                Ok(sig)
            }
        }
    }
}

/// A public key that verifies tokens, parsed once.
pub struct Verifier {
    kid: String,
    alg: SigningAlg,
    key: ParsedPublicKey,
    jwk: Value,
    publish_until: Option<i64>,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .field("publish_until", &self.publish_until)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// The algorithm this key verifies; a token claiming another `alg` is
    /// refused (no algorithm confusion).
    pub fn alg(&self) -> SigningAlg {
        self.alg
    }

    /// Whether `sig` is a valid signature of `msg`.
    pub(crate) fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        self.key.verify_sig(msg, sig).is_ok()
    }

    fn live_at(&self, now: i64) -> bool {
        self.publish_until.is_none_or(|until| until > now)
    }
}

fn b64d(s: &str) -> Result<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| Error::server("malformed base64 in a stored JWK"))
}

/// RFC 7638 thumbprint: SHA-256 over the required members in lexicographic
/// order, without whitespace.
fn thumbprint(jwk: &Value) -> Result<String> {
    let get = |k: &str| {
        jwk.get(k)
            .and_then(Value::as_str)
            .ok_or_else(|| Error::server(format!("JWK lacks `{k}`")))
    };
    let canonical = match get("kty")? {
        "OKP" => format!(
            r#"{{"crv":"{}","kty":"OKP","x":"{}"}}"#,
            get("crv")?,
            get("x")?
        ),
        "EC" => format!(
            r#"{{"crv":"{}","kty":"EC","x":"{}","y":"{}"}}"#,
            get("crv")?,
            get("x")?,
            get("y")?
        ),
        "RSA" => format!(r#"{{"e":"{}","kty":"RSA","n":"{}"}}"#, get("e")?, get("n")?),
        other => return Err(Error::server(format!("unsupported JWK kty {other}"))),
    };
    Ok(crate::b64(&Sha256::digest(canonical.as_bytes())))
}

/// DER `RSAPublicKey ::= SEQUENCE { modulus INTEGER, publicExponent INTEGER }`
/// (RFC 8017 §A.1.1), the form aws-lc-rs verifies with.
fn rsa_public_der(n: &[u8], e: &[u8]) -> Vec<u8> {
    fn len(out: &mut Vec<u8>, n: usize) {
        if n < 0x80 {
            out.push(n as u8);
        } else {
            let bytes: Vec<u8> = n
                .to_be_bytes()
                .into_iter()
                .skip_while(|b| *b == 0)
                .collect();
            out.push(0x80 | bytes.len() as u8);
            out.extend(bytes);
        }
    }
    fn integer(out: &mut Vec<u8>, v: &[u8]) {
        let v: Vec<u8> = {
            let trimmed: Vec<u8> = v.iter().copied().skip_while(|b| *b == 0).collect();
            let mut t = if trimmed.is_empty() { vec![0] } else { trimmed };
            if t.first().is_some_and(|b| b & 0x80 != 0) {
                t.insert(0, 0);
            }
            t
        };
        out.push(0x02);
        len(out, v.len());
        out.extend(v);
    }
    let mut body = Vec::new();
    integer(&mut body, n);
    integer(&mut body, e);
    let mut out = vec![0x30];
    len(&mut out, body.len());
    out.extend(body);
    out
}

fn verifier_from_record(record: &KeyRecord) -> Result<Verifier> {
    let alg = SigningAlg::parse(&record.alg)
        .ok_or_else(|| Error::server(format!("stored key has unknown alg {}", record.alg)))?;
    let jwk: Value = serde_json::from_str(&record.public_jwk)
        .map_err(|e| Error::server(format!("stored JWK is not JSON: {e}")))?;
    let field = |k: &str| -> Result<Vec<u8>> {
        b64d(
            jwk.get(k)
                .and_then(Value::as_str)
                .ok_or_else(|| Error::server(format!("stored JWK lacks `{k}`")))?,
        )
    };
    let parsed = match alg {
        SigningAlg::EdDsa => UnparsedPublicKey::new(&ED25519, field("x")?).parse(),
        SigningAlg::Es256 => {
            let mut point = vec![0x04];
            point.extend(field("x")?);
            point.extend(field("y")?);
            UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point).parse()
        }
        SigningAlg::Rs256 => UnparsedPublicKey::new(
            &RSA_PKCS1_2048_8192_SHA256,
            rsa_public_der(&field("n")?, &field("e")?),
        )
        .parse(),
    }
    .map_err(|e| Error::server(format!("stored public key {} rejected: {e}", record.kid)))?;
    if thumbprint(&jwk)? != record.kid {
        return Err(Error::server(format!(
            "stored key {} does not match its thumbprint",
            record.kid
        )));
    }
    Ok(Verifier {
        kid: record.kid.clone(),
        alg,
        key: parsed,
        jwk,
        publish_until: record.publish_until,
    })
}

fn signer_from_record(record: &KeyRecord, cipher: &KeyCipher) -> Result<Signer> {
    let alg = SigningAlg::parse(&record.alg)
        .ok_or_else(|| Error::server(format!("stored key has unknown alg {}", record.alg)))?;
    let pkcs8 = cipher.open(&record.kid, &record.alg, &record.private_sealed)?;
    let reject = |e: aws_lc_rs::error::KeyRejected| {
        Error::server(format!("stored private key {} rejected: {e}", record.kid))
    };
    let key = match alg {
        SigningAlg::EdDsa => PrivateKey::Ed(Ed25519KeyPair::from_pkcs8(&pkcs8).map_err(reject)?),
        SigningAlg::Es256 => PrivateKey::Ec(
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &pkcs8).map_err(reject)?,
        ),
        SigningAlg::Rs256 => {
            PrivateKey::Rsa(signature::RsaKeyPair::from_pkcs8(&pkcs8).map_err(reject)?)
        }
    };
    Ok(Signer {
        kid: record.kid.clone(),
        alg,
        key,
        rng: LcRandom::new(),
    })
}

/// Generates a new signing key of `alg` and returns it as a record to store
/// (private half sealed with `cipher`).
pub fn generate_key(
    alg: SigningAlg,
    cipher: &KeyCipher,
    random: &dyn Random,
    now: i64,
) -> Result<KeyRecord> {
    let failed = |_| Error::server(format!("{} key generation failed", alg.as_str()));
    let rng = LcRandom::new();
    let (pkcs8, jwk) = match alg {
        SigningAlg::EdDsa => {
            let doc = Ed25519KeyPair::generate_pkcs8(&rng).map_err(failed)?;
            let pair = Ed25519KeyPair::from_pkcs8(doc.as_ref())
                .map_err(|_| Error::server("generated Ed25519 key rejected"))?;
            let x = crate::b64(pair.public_key().as_ref());
            (
                doc.as_ref().to_vec(),
                json!({"kty": "OKP", "crv": "Ed25519", "x": x}),
            )
        }
        SigningAlg::Es256 => {
            let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                .map_err(failed)?;
            let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, doc.as_ref())
                .map_err(|_| Error::server("generated P-256 key rejected"))?;
            let point = pair.public_key().as_ref();
            // Uncompressed SEC1 point: 0x04 || X (32) || Y (32).
            if point.len() != 65 {
                return Err(Error::server("unexpected P-256 public key encoding"));
            }
            let (x, y) = point[1..].split_at(32);
            (
                doc.as_ref().to_vec(),
                json!({"kty": "EC", "crv": "P-256", "x": crate::b64(x), "y": crate::b64(y)}),
            )
        }
        SigningAlg::Rs256 => {
            let pair = signature::RsaKeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048)
                .map_err(failed)?;
            let der = pair
                .as_der()
                .map_err(|_| Error::server("RSA key encoding failed"))?;
            let public = pair.public_key();
            let n = crate::b64(public.modulus().big_endian_without_leading_zero());
            let e = crate::b64(public.exponent().big_endian_without_leading_zero());
            (der.as_ref().to_vec(), json!({"kty": "RSA", "n": n, "e": e}))
        }
    };
    let kid = thumbprint(&jwk)?;
    let private_sealed = cipher.seal(random, &kid, alg.as_str(), &pkcs8)?;
    Ok(KeyRecord {
        kid,
        alg: alg.as_str().to_string(),
        public_jwk: jwk.to_string(),
        private_sealed,
        created_at: now,
        retired_at: None,
        publish_until: None,
    })
}

#[derive(Default)]
struct RingState {
    /// The signer of each algorithm, with its key's creation time.
    current: HashMap<SigningAlg, (Arc<Signer>, i64)>,
    verifiers: HashMap<String, Arc<Verifier>>,
}

/// The keys in use: the current signer of each algorithm and every
/// published verifier.
///
/// Rotation with overlap, per algorithm: a retired key stops signing at
/// once but keeps verifying (and stays in the JWKS) until `publish_until`,
/// when the last token it signed has expired.
pub struct KeyRing {
    state: RwLock<RingState>,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.read();
        let mut current: Vec<(&SigningAlg, &str)> = s
            .current
            .iter()
            .map(|(alg, (c, _))| (alg, c.kid.as_str()))
            .collect();
        current.sort();
        f.debug_struct("KeyRing")
            .field("current", &current)
            .field("verifiers", &s.verifiers.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl KeyRing {
    /// An empty ring: no signer, nothing published.
    pub fn empty() -> Self {
        Self {
            state: RwLock::new(RingState::default()),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, RingState> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the ring's contents with `records`. Of each algorithm, the
    /// newest un-retired record becomes its signer (its private key is
    /// decrypted with `cipher`); records past `publish_until` at `now` are
    /// skipped.
    pub fn load(&self, records: &[KeyRecord], cipher: &KeyCipher, now: i64) -> Result<()> {
        let mut next = RingState::default();
        let mut newest: HashMap<SigningAlg, &KeyRecord> = HashMap::new();
        for r in records {
            if r.publish_until.is_some_and(|until| until <= now) {
                continue;
            }
            let v = verifier_from_record(r)?;
            let alg = v.alg;
            next.verifiers.insert(r.kid.clone(), Arc::new(v));
            if r.retired_at.is_none()
                && newest
                    .get(&alg)
                    .is_none_or(|n| (r.created_at, &r.kid) > (n.created_at, &n.kid))
            {
                newest.insert(alg, r);
            }
        }
        for (alg, r) in newest {
            let signer = Arc::new(signer_from_record(r, cipher)?);
            next.current.insert(alg, (signer, r.created_at));
        }
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = next;
        Ok(())
    }

    /// The key of `alg` that signs new tokens.
    pub fn current(&self, alg: SigningAlg) -> Option<Arc<Signer>> {
        self.read().current.get(&alg).map(|(s, _)| s.clone())
    }

    /// When the current key of `alg` was created.
    pub fn current_created_at(&self, alg: SigningAlg) -> Option<i64> {
        self.read().current.get(&alg).map(|(_, at)| *at)
    }

    /// The verifier for `kid`, if it is still published at `now`.
    pub fn verifier(&self, kid: &str, now: i64) -> Option<Arc<Verifier>> {
        self.read()
            .verifiers
            .get(kid)
            .filter(|v| v.live_at(now))
            .cloned()
    }

    /// The JWK Set (RFC 7517 §5) of every key published at `now`: public
    /// members only, each with `kid`, `alg` and `use: sig`.
    pub fn jwks(&self, now: i64) -> Value {
        let s = self.read();
        let mut keys: Vec<(&String, &Arc<Verifier>)> =
            s.verifiers.iter().filter(|(_, v)| v.live_at(now)).collect();
        // Current keys first (in the order of `SigningAlg::ALL`), then the
        // retired ones by kid, so the document is stable.
        let rank = |kid: &str| {
            SigningAlg::ALL
                .iter()
                .position(|alg| s.current.get(alg).is_some_and(|(c, _)| c.kid == kid))
                .unwrap_or(SigningAlg::ALL.len())
        };
        keys.sort_by_key(|(kid, _)| (rank(kid), kid.as_str()));
        let keys: Vec<Value> = keys
            .into_iter()
            .map(|(kid, v)| {
                let mut jwk = v.jwk.clone();
                if let Some(obj) = jwk.as_object_mut() {
                    obj.insert("kid".into(), Value::String(kid.clone()));
                    obj.insert("alg".into(), Value::String(v.alg.as_str().into()));
                    obj.insert("use".into(), Value::String("sig".into()));
                }
                jwk
            })
            .collect();
        json!({ "keys": keys })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SeededRandom;

    #[test]
    fn every_alg_generates_seals_loads_and_signs() {
        let cipher = KeyCipher::from_secret("test secret").unwrap();
        let random = SeededRandom::new(7);
        for alg in [SigningAlg::EdDsa, SigningAlg::Es256, SigningAlg::Rs256] {
            let rec = generate_key(alg, &cipher, &random, 100).unwrap();
            assert_eq!(rec.alg, alg.as_str());
            let ring = KeyRing::empty();
            ring.load(std::slice::from_ref(&rec), &cipher, 100).unwrap();
            let signer = ring.current(alg).unwrap();
            assert_eq!(signer.kid(), rec.kid);
            let sig = signer.sign(b"hello").unwrap();
            let v = ring.verifier(&rec.kid, 100).unwrap();
            assert!(v.verify(b"hello", &sig), "{alg:?}");
            assert!(!v.verify(b"hellO", &sig), "{alg:?}");
            let jwks = ring.jwks(100).to_string();
            for private in ["\"d\"", "\"p\"", "\"q\"", "\"dp\"", "\"dq\"", "\"qi\""] {
                assert!(!jwks.contains(private), "{alg:?} leaks {private}: {jwks}");
            }
        }
    }

    /// One signer per algorithm, the newest un-retired key of each; a
    /// retired key only verifies.
    #[test]
    fn the_ring_has_a_signer_per_algorithm() {
        let cipher = KeyCipher::from_secret("test secret").unwrap();
        let random = SeededRandom::new(5);
        let old_ed = generate_key(SigningAlg::EdDsa, &cipher, &random, 10).unwrap();
        let mut retired_ed = generate_key(SigningAlg::EdDsa, &cipher, &random, 30).unwrap();
        retired_ed.retired_at = Some(40);
        retired_ed.publish_until = Some(1_000);
        let es = generate_key(SigningAlg::Es256, &cipher, &random, 20).unwrap();
        let ring = KeyRing::empty();
        ring.load(
            &[old_ed.clone(), retired_ed.clone(), es.clone()],
            &cipher,
            50,
        )
        .unwrap();
        assert_eq!(ring.current(SigningAlg::EdDsa).unwrap().kid(), old_ed.kid);
        assert_eq!(ring.current(SigningAlg::Es256).unwrap().kid(), es.kid);
        assert!(ring.current(SigningAlg::Rs256).is_none());
        assert_eq!(ring.current_created_at(SigningAlg::Es256), Some(20));
        assert!(ring.verifier(&retired_ed.kid, 50).is_some());
        // Current keys first, in the order of `SigningAlg::ALL`.
        let kids: Vec<String> = ring.jwks(50)["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kid"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(kids, [old_ed.kid, es.kid, retired_ed.kid]);
    }

    #[test]
    fn wrong_secret_cannot_open_keys() {
        let cipher = KeyCipher::from_secret("right").unwrap();
        let other = KeyCipher::from_secret("wrong").unwrap();
        let rec = generate_key(SigningAlg::EdDsa, &cipher, &SeededRandom::new(1), 0).unwrap();
        let e = KeyRing::empty().load(&[rec], &other, 0).unwrap_err();
        assert!(e.internal_cause().unwrap().contains("cannot decrypt"));
    }

    /// Both derivations are pinned: a change to either would leave every
    /// deployed instance unable to open its stored keys.
    #[test]
    fn generated_secrets_skip_stretching_and_both_derivations_are_stable() {
        let generated = generate_server_secret(&SeededRandom::new(11));
        assert!(generated.starts_with(GENERATED_SECRET_PREFIX));
        assert_eq!(generated_key_bytes(&generated).map(|b| b.len()), Some(32));
        let mac = |secret: &str| -> String {
            KeyCipher::from_secret(secret)
                .unwrap()
                .form_mac("pin", b"message")
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        };
        let fixed = format!("{GENERATED_SECRET_PREFIX}{}", "A".repeat(43));
        assert_eq!(
            mac(&fixed),
            "4047ff55c0c11c466909a5dcc71d2a3d9d30cd09a10f0e21bc9c8a94bc86ec78"
        );
        assert_eq!(
            mac("a passphrase"),
            "682a13771b90e658693d5ee15c4b025d8ed6363beab1fe7bab8be848c0de03ac"
        );
        // A malformed generated secret is a passphrase like any other.
        for s in [
            format!("{GENERATED_SECRET_PREFIX}{}", "A".repeat(42)),
            format!("{GENERATED_SECRET_PREFIX}{}!", "A".repeat(42)),
        ] {
            assert_eq!(generated_key_bytes(&s), None);
            assert_ne!(mac(&s), mac(&fixed));
        }
        let cipher = KeyCipher::from_secret(&generated).unwrap();
        let sealed = cipher
            .seal_secret(&SeededRandom::new(1), "k", b"private")
            .unwrap();
        assert_eq!(cipher.open_secret("k", &sealed).unwrap(), b"private");
        let other = KeyCipher::from_secret("a passphrase").unwrap();
        assert!(other.open_secret("k", &sealed).is_err());
    }

    #[test]
    fn sealed_key_is_bound_to_its_kid() {
        let cipher = KeyCipher::from_secret("s").unwrap();
        let r = SeededRandom::new(3);
        let a = generate_key(SigningAlg::EdDsa, &cipher, &r, 0).unwrap();
        let mut b = generate_key(SigningAlg::EdDsa, &cipher, &r, 1).unwrap();
        b.private_sealed = a.private_sealed.clone();
        assert!(KeyRing::empty().load(&[b], &cipher, 1).is_err());
    }

    #[test]
    fn rfc7638_thumbprint_example() {
        // RFC 7638 §3.1 example key.
        let jwk = json!({
            "kty": "RSA",
            "n": "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw",
            "e": "AQAB"
        });
        assert_eq!(
            thumbprint(&jwk).unwrap(),
            "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
        );
    }
}
