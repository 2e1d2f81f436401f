//! The crate's one error type. Every message is written for whoever must act on it, and none
//! ever carries an API key (requests are never formatted into errors).

use crate::ProviderKind;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The `[models.<name>]` entry is wrong or its key cannot be found.
    #[error("{0}")]
    Config(String),
    /// The provider refused the request (a 4xx other than 429), or kept failing (429/5xx) until
    /// the attempts ran out.
    #[error("{provider} answered {status}: {message}; {action}")]
    Status {
        provider: ProviderKind,
        status: u16,
        /// The provider's own `error.message`, or the start of the body.
        message: String,
        /// What to do about it.
        action: String,
    },
    /// The server could not be reached, or the connection broke.
    #[error("{provider}: {message}")]
    Connection {
        provider: ProviderKind,
        message: String,
    },
    /// The stream was not what the provider documents, or the provider reported an error in it.
    #[error("{provider} stream: {message}")]
    Stream {
        provider: ProviderKind,
        message: String,
    },
    /// The cancellation token fired.
    #[error("the model request was cancelled")]
    Cancelled,
}
