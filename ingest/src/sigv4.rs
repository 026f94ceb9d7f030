//! AWS Signature Version 4, checked: a request the AWS SDKs, boto3 or the AWS CLI signed with a
//! secret access key that is one of the ingest endpoint's tokens is taken; any other is refused
//! as Kinesis refuses it. The access key id is not checked (use any, `tally` for instance): the
//! secret is what is shared, and it never travels — only the signature it makes does.
//!
//! The canonical request and the string to sign are built as the specification says
//! (<https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html>);
//! the signing key and the signature are `aws-sigv4`'s, the SDKs' own.

use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::kinesis::KinesisError;

/// How far a request's time may be from this machine's, as AWS allows.
pub const MAX_SKEW: Duration = Duration::from_secs(15 * 60);

/// The parts of a request a signature covers.
pub struct Signed<'a> {
    /// `POST`.
    pub method: &'a str,
    /// The path (`/`).
    pub path: &'a str,
    /// The query string, without `?` (empty for the Kinesis API).
    pub query: &'a str,
    /// Every header, by lowercase name.
    pub headers: &'a [(String, String)],
    /// The body.
    pub body: &'a [u8],
}

fn refused(code: &'static str, message: impl Into<String>) -> KinesisError {
    KinesisError {
        status: 400,
        code,
        message: message.into(),
    }
}

/// Whether `req` is signed with one of `secrets` at a time within [`MAX_SKEW`] of `now`.
pub fn verify<'s>(
    req: &Signed<'_>,
    secrets: impl Iterator<Item = &'s [u8]>,
    now: SystemTime,
) -> Result<(), KinesisError> {
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let auth = header("authorization").ok_or_else(|| {
        refused(
            "MissingAuthenticationTokenException",
            "Missing Authentication Token: sign the request with AWS Signature Version 4, the \
             endpoint's token as the secret access key",
        )
    })?;
    let parts = Authorization::parse(auth)?;
    let amz_date = header("x-amz-date").ok_or_else(|| {
        refused(
            "IncompleteSignatureException",
            "the request has no X-Amz-Date header",
        )
    })?;
    let at = parse_amz_date(amz_date)?;
    let skew = now
        .duration_since(at)
        .or_else(|_| at.duration_since(now))
        .unwrap_or_default();
    if skew > MAX_SKEW {
        return Err(refused(
            "InvalidSignatureException",
            format!(
                "Signature expired: {amz_date} is more than 15 minutes from this machine's time"
            ),
        ));
    }
    let canonical = canonical_request(req, &parts.signed_headers)?;
    let scope = format!(
        "{}/{}/{}/aws4_request",
        parts.date, parts.region, parts.service
    );
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let mut matched = subtle::Choice::from(0);
    for secret in secrets {
        let secret = String::from_utf8_lossy(secret);
        let key =
            aws_sigv4::sign::v4::generate_signing_key(&secret, at, &parts.region, &parts.service);
        let expected = aws_sigv4::sign::v4::calculate_signature(key, to_sign.as_bytes());
        matched |= expected.as_bytes().ct_eq(parts.signature.as_bytes());
    }
    if bool::from(matched) {
        Ok(())
    } else {
        Err(refused(
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided: \
             sign with the endpoint's token as the secret access key",
        ))
    }
}

/// The `Authorization` header's parts.
struct Authorization {
    date: String,
    region: String,
    service: String,
    signed_headers: Vec<String>,
    signature: String,
}

impl Authorization {
    fn parse(h: &str) -> Result<Authorization, KinesisError> {
        let incomplete = |what: &str| {
            refused(
                "IncompleteSignatureException",
                format!("the Authorization header is not AWS Signature Version 4: {what}"),
            )
        };
        let rest = h
            .strip_prefix("AWS4-HMAC-SHA256 ")
            .ok_or_else(|| incomplete("it does not start with AWS4-HMAC-SHA256"))?;
        let field = |name: &str| {
            rest.split(',')
                .map(str::trim)
                .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
                .ok_or_else(|| incomplete(&format!("no {name}")))
        };
        let credential: Vec<&str> = field("Credential")?.split('/').collect();
        let [_key_id, date, region, service, "aws4_request"] = credential[..] else {
            return Err(incomplete(
                "Credential is not key/date/region/service/aws4_request",
            ));
        };
        Ok(Authorization {
            date: date.to_owned(),
            region: region.to_owned(),
            service: service.to_owned(),
            signed_headers: field("SignedHeaders")?
                .split(';')
                .map(str::to_owned)
                .collect(),
            signature: field("Signature")?.to_owned(),
        })
    }
}

/// `YYYYMMDD'T'HHMMSS'Z'` as a time.
fn parse_amz_date(d: &str) -> Result<SystemTime, KinesisError> {
    let bad = || {
        refused(
            "IncompleteSignatureException",
            format!("X-Amz-Date {d:?} is not YYYYMMDDTHHMMSSZ"),
        )
    };
    if d.len() != 16 || !d.is_ascii() {
        return Err(bad());
    }
    let rfc3339 = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &d[0..4],
        &d[4..6],
        &d[6..8],
        &d[9..11],
        &d[11..13],
        &d[13..15]
    );
    humantime::parse_rfc3339(&rfc3339).map_err(|_| bad())
}

/// The canonical request: method, path, query, the signed headers (lowercase, values trimmed
/// and their inner spaces collapsed), their names, and the body's SHA-256.
fn canonical_request(req: &Signed<'_>, signed: &[String]) -> Result<String, KinesisError> {
    let mut headers = String::new();
    for name in signed {
        let values: Vec<String> = req
            .headers
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        if values.is_empty() {
            return Err(refused(
                "IncompleteSignatureException",
                format!("the signed header {name} is not in the request"),
            ));
        }
        headers.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    let mut query: Vec<&str> = req.query.split('&').filter(|p| !p.is_empty()).collect();
    query.sort_unstable();
    Ok(format!(
        "{}\n{}\n{}\n{headers}\n{}\n{}",
        req.method,
        req.path,
        query.join("&"),
        signed.join(";"),
        hex::encode(Sha256::digest(req.body))
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's own worked example (the IAM user guide's `GET /?Action=ListUsers` request to IAM,
    /// signed with its example secret): the signature it publishes is the one computed here.
    #[test]
    fn aws_s_published_example_verifies() {
        let headers: Vec<(String, String)> = [
            (
                "content-type",
                "application/x-www-form-urlencoded; charset=utf-8",
            ),
            ("host", "iam.amazonaws.com"),
            ("x-amz-date", "20150830T123600Z"),
            (
                "authorization",
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, \
                 SignedHeaders=content-type;host;x-amz-date, \
                 Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7",
            ),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let req = Signed {
            method: "GET",
            path: "/",
            query: "Action=ListUsers&Version=2010-05-08",
            headers: &headers,
            body: b"",
        };
        let at = parse_amz_date("20150830T123600Z").unwrap();
        let secret = b"wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
        verify(&req, [&secret[..]].into_iter(), at).unwrap();
        let wrong = verify(
            &req,
            [&b"another-secret-of-forty-chars-0000000000"[..]].into_iter(),
            at,
        );
        assert_eq!(wrong.unwrap_err().code, "InvalidSignatureException");
        let late = verify(&req, [&secret[..]].into_iter(), at + MAX_SKEW * 2);
        assert!(late.unwrap_err().message.contains("expired"));
    }
}
