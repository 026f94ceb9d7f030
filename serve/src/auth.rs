//! Who may read: with a token configured (`tally serve --auth-token-file`, or
//! `--auth-token-env` where a platform hands secrets over as environment variables, as ECS does),
//! every route asks for `Authorization: Bearer <token>` but the probes (`/healthz`, `/readyz`),
//! the API's own description (`/api/openapi.json`) and the dashboard's page (its script sends the
//! token it is given in the page's `#token=` fragment). A missing or wrong token is a 401 with a
//! JSON error, as every other error of the API.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::ApiError;

/// The shortest token taken: a guessable one protects nothing.
pub const MIN_TOKEN_LEN: usize = 16;

/// The bearer tokens a request may carry: usually one; two while a rotation overlaps (the new
/// one and the old one, whitespace apart, so that callers move over without a refused request).
#[derive(Clone)]
pub struct Token(Arc<Vec<Vec<u8>>>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token({} accepted)", self.0.len())
    }
}

impl Token {
    /// The tokens in `text` (whitespace apart: one per line in a file), or why one is not a
    /// token; `from` names where they came from.
    pub fn parse(text: &str, from: &str) -> Result<Token> {
        let tokens: Vec<&str> = text.split_whitespace().collect();
        anyhow::ensure!(!tokens.is_empty(), "{from}: no token in it");
        for t in &tokens {
            anyhow::ensure!(
                t.len() >= MIN_TOKEN_LEN,
                "{from}: a token must be at least {MIN_TOKEN_LEN} characters (got {})",
                t.len()
            );
            anyhow::ensure!(
                t.bytes().all(|b| b.is_ascii_graphic()),
                "{from}: a token must be printable ASCII"
            );
        }
        Ok(Token(Arc::new(
            tokens.iter().map(|t| t.as_bytes().to_vec()).collect(),
        )))
    }

    /// The tokens a file holds.
    pub fn from_file(path: &Path) -> Result<Token> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--auth-token-file {}: cannot read it", path.display()))?;
        Token::parse(&text, &format!("--auth-token-file {}", path.display()))
    }

    /// The tokens an environment variable holds.
    pub fn from_env(name: &str) -> Result<Token> {
        let text = std::env::var(name)
            .with_context(|| format!("--auth-token-env {name}: the variable is not set"))?;
        Token::parse(&text, &format!("--auth-token-env {name}"))
    }

    /// The tokens a command's `--auth-token-file` or `--auth-token-env` names (`None`: neither).
    pub fn from_flags(file: Option<&Path>, env: Option<&str>) -> Result<Option<Token>> {
        match (file, env) {
            (Some(f), _) => Token::from_file(f).map(Some),
            (None, Some(v)) => Token::from_env(v).map(Some),
            (None, None) => Ok(None),
        }
    }

    /// The tokens, for a check other than a bearer header (`tally ingest`: the secret a
    /// request is signed with).
    pub fn secrets(&self) -> impl Iterator<Item = &[u8]> {
        self.0.iter().map(Vec::as_slice)
    }

    /// Whether the `Authorization` header carries one of the tokens (each compared in constant
    /// time, all of them every time).
    fn admits(&self, header: Option<&str>) -> bool {
        let Some(given) = header.and_then(bearer) else {
            return false;
        };
        let given = given.trim().as_bytes();
        self.0
            .iter()
            .fold(subtle::Choice::from(0), |any, t| any | given.ct_eq(t))
            .into()
    }
}

/// The credentials of an `Authorization` header of the `Bearer` scheme, its name matched as
/// HTTP matches a scheme's: ignoring case.
fn bearer(header: &str) -> Option<&str> {
    let (scheme, rest) = header.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(rest)
}

/// Routes anyone may call.
fn is_open(path: &str) -> bool {
    matches!(path, "/" | "/healthz" | "/readyz" | "/api/openapi.json")
}

/// The middleware: the request goes on if its route is open or it carries the token.
pub async fn require(State(token): State<Token>, req: Request, next: Next) -> Response {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if is_open(req.uri().path()) || token.admits(given) {
        return next.run(req).await;
    }
    let why = match given {
        Some(h) if bearer(h).is_some() => "the bearer token is not this API's",
        _ => "this API asks for a bearer token: send `Authorization: Bearer <token>`",
    };
    let mut r = ApiError(StatusCode::UNAUTHORIZED, why.into()).into_response();
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_token_is_admitted() {
        let t = Token::parse("s3cret-token-0123456789\n", "test").unwrap();
        assert!(t.admits(Some("Bearer s3cret-token-0123456789")));
        assert!(t.admits(Some("bearer s3cret-token-0123456789")));
        assert!(t.admits(Some("BEARER s3cret-token-0123456789")));
        assert!(!t.admits(Some("Bearer s3cret-token-012345678")));
        assert!(!t.admits(Some("Basic s3cret-token-0123456789")));
        assert!(!t.admits(None));
        assert!(Token::parse("short", "x").is_err());
        assert!(Token::parse("  \n", "x").is_err());
        // A rotation: the new token and the old one, both admitted while callers move over.
        let both = Token::parse("new-token-0123456789\nold-token-0123456789\n", "x").unwrap();
        assert!(both.admits(Some("Bearer new-token-0123456789")));
        assert!(both.admits(Some("Bearer old-token-0123456789")));
        assert!(!both.admits(Some("Bearer new-token-012345678")));
    }
}
