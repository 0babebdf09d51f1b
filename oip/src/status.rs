//! Errors as gRPC statuses: the code each stable error kind maps to, and for overload the
//! server's advice on when to retry (`google.rpc.RetryInfo` in the status details, and a
//! `retry-after` metadata entry in seconds for clients that read no details).

use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};
use wire::ErrorType;

use crate::OipError;

/// The gRPC code of an error kind.
pub fn code(t: ErrorType) -> Code {
    match t {
        // Too large: a query past the length limit (a message past the size limit is gRPC's own
        // RESOURCE_EXHAUSTED, before any of this).
        ErrorType::InvalidRequest | ErrorType::TooLarge => Code::InvalidArgument,
        ErrorType::Overloaded => Code::ResourceExhausted,
        ErrorType::Unavailable | ErrorType::Upstream => Code::Unavailable,
        ErrorType::Timeout => Code::DeadlineExceeded,
        ErrorType::NotFound => Code::NotFound,
        ErrorType::MethodNotAllowed => Code::Unimplemented,
        ErrorType::Internal => Code::Internal,
    }
}

/// The status for an error of kind `t`, with `retry_after` when the server advises one.
pub fn status(t: ErrorType, message: impl Into<String>, retry_after: Option<Duration>) -> Status {
    let message = message.into();
    let Some(delay) = retry_after else {
        return Status::new(code(t), message);
    };
    let mut s = Status::with_error_details(code(t), message, ErrorDetails::with_retry_info(Some(delay)));
    if let Ok(v) = delay.as_secs().to_string().parse() {
        s.metadata_mut().insert("retry-after", v);
    }
    s
}

impl From<OipError> for Status {
    fn from(e: OipError) -> Self {
        status(e.error_type, e.message, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overload_is_resource_exhausted_with_retry_info() {
        let s = status(ErrorType::Overloaded, "busy", Some(Duration::from_secs(2)));
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert_eq!(s.metadata().get("retry-after").unwrap(), "2");
        let info = s.get_details_retry_info().expect("RetryInfo");
        assert_eq!(info.retry_delay, Some(Duration::from_secs(2)));
        assert_eq!(Status::from(OipError::invalid("bad")).code(), Code::InvalidArgument);
        assert_eq!(code(ErrorType::Timeout), Code::DeadlineExceeded);
    }
}
