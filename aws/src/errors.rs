//! SDK errors as port errors: every message names the call and the resource.

use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_runtime_api::http::Response as HttpResponse;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use tally_core::ports::PortError;

/// An SDK call's error, as the SDKs answer it.
pub type CallError<E> = SdkError<E, HttpResponse>;

/// What an SDK call's service error is: its code and message, for [`map`].
pub trait ServiceError: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static {}

impl<E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static> ServiceError for E {}

/// Where a call went, for messages.
#[derive(Clone, Debug)]
pub struct Target {
    /// `Kinesis` or `DynamoDB`.
    pub service: &'static str,
    /// The endpoint URL, or a description of the default one.
    pub endpoint: String,
}

impl Target {
    /// The endpoint override, or the service's regional endpoint.
    pub fn new(
        service: &'static str,
        host: &str,
        url: Option<&String>,
        sdk: &aws_config::SdkConfig,
    ) -> Target {
        let endpoint = url
            .cloned()
            .unwrap_or_else(|| format!("{host}.{}.amazonaws.com", crate::region_of(sdk)));
        Target { service, endpoint }
    }

    /// The endpoint as an error names it, with the call made there.
    pub fn endpoint_of(&self, call: &str) -> String {
        format!("{} endpoint {} ({call})", self.service, self.endpoint)
    }
}

/// Maps an SDK error of `call` on `resource`.
pub fn map<E: ServiceError>(
    target: &Target,
    call: &str,
    resource: &str,
    err: CallError<E>,
) -> PortError {
    match &err {
        SdkError::DispatchFailure(d) => {
            let cause = root_cause(&err);
            if mentions_credentials(&err) {
                return PortError::Other(no_credentials(call, resource, &cause));
            }
            let detail = if d.is_timeout() {
                "connection timed out".to_owned()
            } else {
                cause
            };
            PortError::Unavailable {
                endpoint: target.endpoint_of(call),
                detail,
            }
        }
        SdkError::TimeoutError(_) => {
            PortError::Timeout(format!("{call} on {resource} at {}", target.endpoint))
        }
        SdkError::ResponseError(_) => PortError::Unavailable {
            endpoint: target.endpoint_of(call),
            detail: "the response could not be read".into(),
        },
        SdkError::ServiceError(se) => {
            let e = se.err();
            let status = se.raw().status().as_u16();
            let message = e.message().unwrap_or("").to_owned();
            match e.code() {
                Some(code) => from_code(target, call, resource, code, &message),
                // A server error without a code (an overloaded or failing endpoint): transient.
                None if status >= 500 => PortError::Unavailable {
                    endpoint: target.endpoint_of(call),
                    detail: format!("HTTP {status} {message}"),
                },
                None => PortError::Other(format!("{call} on {resource}: HTTP {status} {message}")),
            }
        }
        _ if mentions_credentials(&err) => {
            PortError::Other(no_credentials(call, resource, &root_cause(&err)))
        }
        _ => PortError::Other(format!("{call} on {resource}: {}", root_cause(&err))),
    }
}

/// The innermost cause of an error, in one line: what went wrong, without the SDK's chain of
/// wrappers and debug dumps.
pub fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut e = err;
    while let Some(next) = e.source() {
        e = next;
    }
    let text = e.to_string();
    let line = text.lines().next().unwrap_or("").trim();
    if line.is_empty() {
        err.to_string()
    } else {
        line.to_owned()
    }
}

/// Whether any error in the chain is about resolving credentials.
fn mentions_credentials(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut e = Some(err);
    while let Some(x) = e {
        let t = x.to_string().to_lowercase();
        if t.contains("credential") || t.contains("identity") {
            return true;
        }
        e = x.source();
    }
    false
}

/// What to do when no credentials were found.
pub fn no_credentials(call: &str, resource: &str, cause: &str) -> String {
    format!(
        "no AWS credentials for {call} on {resource} ({cause}): set AWS_ACCESS_KEY_ID and \
         AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run with an IAM role (on ECS, the task role)"
    )
}

/// Maps an AWS error code.
pub fn from_code(
    target: &Target,
    call: &str,
    resource: &str,
    code: &str,
    message: &str,
) -> PortError {
    let detail = format!("{code}: {message}");
    match code {
        "ProvisionedThroughputExceededException"
        | "ThrottlingException"
        | "RequestLimitExceeded"
        | "LimitExceededException"
        | "Throttling"
        | "ThrottledException"
        | "KMSThrottlingException" => {
            PortError::Throttled(format!("{call} on {resource}: {detail}"))
        }
        // ResourceInUseException: busy (a consumer being registered, a shard with another
        // subscription still active); the same call succeeds later.
        "TransactionConflictException"
        | "TransactionInProgressException"
        | "ResourceInUseException" => {
            PortError::Conflict(format!("{call} on {resource}: {detail}"))
        }
        "ExpiredIteratorException" => PortError::IteratorExpired(format!("{resource}: {detail}")),
        "ResourceNotFoundException" => PortError::NotFound {
            what: format!("{} {resource}", target.service),
            hint: format!(" ({call}: {message}); run `tally setup` to create it"),
        },
        "AccessDeniedException"
        | "UnrecognizedClientException"
        | "InvalidSignatureException"
        | "MissingAuthenticationToken"
        | "ExpiredTokenException"
        | "IncompleteSignature"
        | "NotAuthorized" => PortError::Permission {
            call: call.to_owned(),
            resource: resource.to_owned(),
            detail,
        },
        "InternalFailure"
        | "InternalServerError"
        | "ServiceUnavailable"
        | "ServiceUnavailableException"
        | "KMSInternalException" => PortError::Unavailable {
            endpoint: target.endpoint_of(call),
            detail,
        },
        "ValidationException" | "InvalidArgumentException" | "SerializationException" => {
            PortError::Invalid(format!("{call} on {resource}: {detail}"))
        }
        "ConditionalCheckFailedException" => PortError::Fenced {
            app: String::new(),
            shard_id: resource.to_owned(),
        },
        _ => PortError::Other(format!("{call} on {resource}: {detail}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_kinds() {
        let t = Target {
            service: "Kinesis",
            endpoint: "http://127.0.0.1:4568".into(),
        };
        assert!(from_code(
            &t,
            "GetRecords",
            "s",
            "ProvisionedThroughputExceededException",
            ""
        )
        .is_retryable());
        assert!(matches!(
            from_code(&t, "GetRecords", "s", "ExpiredIteratorException", ""),
            PortError::IteratorExpired(_)
        ));
        let nf = from_code(
            &t,
            "DescribeStreamSummary",
            "stream likes",
            "ResourceNotFoundException",
            "not found",
        )
        .to_string();
        assert!(
            nf.contains("Kinesis stream likes") && nf.contains("tally setup"),
            "{nf}"
        );
        let p = from_code(
            &t,
            "PutRecords",
            "stream likes",
            "AccessDeniedException",
            "no",
        )
        .to_string();
        assert!(
            p.contains("PutRecords") && p.contains("stream likes"),
            "{p}"
        );
        assert!(matches!(
            from_code(&t, "x", "y", "TransactionConflictException", ""),
            PortError::Conflict(_)
        ));
    }
}
