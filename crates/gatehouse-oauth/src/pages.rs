//! The HTML pages of the authorization server (sign-in, sign-up, consent,
//! errors, the OAuth 1.0 approval), rendered by askama from `templates/`:
//! every value a page shows is escaped by the engine, never by hand.
//!
//! Every page is served with the same headers ([`html`]): not cacheable,
//! not frameable (clickjacking), no referrer (the query string of an
//! authorization request must not leak), and a policy that allows no
//! script and no resource from anywhere.

use askama::Template;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::response;

/// `Content-Security-Policy` of every page: nothing but the inline style,
/// no framing by anyone.
const PAGE_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; \
                        base-uri 'none'";

/// A hidden form field.
#[derive(Debug)]
pub(crate) struct Hidden {
    pub(crate) name: &'static str,
    pub(crate) value: String,
}

/// A page explaining why the request stops here.
#[derive(Template)]
#[template(path = "error.html")]
pub(crate) struct ErrorPage<'a> {
    pub(crate) heading: &'a str,
    pub(crate) message: &'a str,
}

/// The sign-in form of the authorization code flow.
#[derive(Template)]
#[template(path = "signin.html")]
pub(crate) struct SignInPage<'a> {
    pub(crate) client_id: &'a str,
    pub(crate) hidden: &'a [Hidden],
    pub(crate) csrf: &'a str,
    pub(crate) username: &'a str,
    pub(crate) error: Option<&'a str>,
    pub(crate) sign_up_href: Option<String>,
    /// "Forgot password?", when the e-mail flows are on.
    pub(crate) forgot_href: Option<String>,
    /// "Continue with <name>", one form each.
    pub(crate) providers: &'a [gatehouse_auth::ProviderPolicy],
}

/// "Forgot password?": the form asking for the account's address.
#[derive(Template)]
#[template(path = "forgot.html")]
pub(crate) struct ForgotPage<'a> {
    pub(crate) hidden: &'a [Hidden],
    pub(crate) csrf: &'a str,
    pub(crate) email: &'a str,
    pub(crate) error: Option<&'a str>,
    pub(crate) sign_in_href: Option<String>,
}

/// "Check your e-mail": the same page whether or not an account has the
/// address, with the form for the code.
#[derive(Template)]
#[template(path = "check_email.html")]
pub(crate) struct CheckEmailPage<'a> {
    pub(crate) hidden: &'a [Hidden],
    pub(crate) csrf: &'a str,
    pub(crate) flow: &'a str,
    pub(crate) error: Option<&'a str>,
    pub(crate) min_password: usize,
}

/// The page of a reset link: a form whose POST spends it (opening the
/// link spends nothing).
#[derive(Template)]
#[template(path = "reset.html")]
pub(crate) struct ResetPage<'a> {
    pub(crate) csrf: &'a str,
    pub(crate) token: &'a str,
    pub(crate) error: Option<&'a str>,
    pub(crate) min_password: usize,
}

/// "Check your e-mail" after a sign-up or "Resend": the code's form and
/// the "Resend" button (the same page whether or not a message was sent).
#[derive(Template)]
#[template(path = "check_verify.html")]
pub(crate) struct CheckVerifyPage<'a> {
    pub(crate) hidden: &'a [Hidden],
    pub(crate) csrf: &'a str,
    pub(crate) flow: &'a str,
    /// The flow of the sign-up's own message, which "Resend" renews (a
    /// resend over the address's limits writes no token of its own).
    pub(crate) origin: &'a str,
    pub(crate) error: Option<&'a str>,
    pub(crate) verify_action: String,
    pub(crate) resend_action: String,
    /// Under `optional` the account exists: on to sign in without
    /// confirming.
    pub(crate) continue_href: Option<String>,
}

/// The page of a verification link: a button whose POST spends it
/// (opening the link spends nothing).
#[derive(Template)]
#[template(path = "verify.html")]
pub(crate) struct VerifyPage<'a> {
    pub(crate) csrf: &'a str,
    pub(crate) token: &'a str,
    pub(crate) error: Option<&'a str>,
    pub(crate) verify_action: String,
}

/// The self-service sign-up form (`[auth] sign_up = true`).
#[derive(Template)]
#[template(path = "signup.html")]
pub(crate) struct SignUpPage<'a> {
    pub(crate) client_id: &'a str,
    pub(crate) hidden: &'a [Hidden],
    pub(crate) csrf: &'a str,
    pub(crate) username: &'a str,
    /// Whether the account type has `email`, and whether sign-up needs one
    /// (`verification = "required"`).
    pub(crate) ask_email: bool,
    pub(crate) email_required: bool,
    pub(crate) email: &'a str,
    pub(crate) error: Option<&'a str>,
    pub(crate) min_password: usize,
    pub(crate) sign_in_href: String,
}

/// The consent page: the scopes a third-party client asks for.
#[derive(Template)]
#[template(path = "consent.html")]
pub(crate) struct ConsentPage<'a> {
    pub(crate) client_id: &'a str,
    pub(crate) username: &'a str,
    pub(crate) scopes: Vec<String>,
    pub(crate) redirect_uri: &'a str,
    pub(crate) hidden: &'a [Hidden],
    pub(crate) csrf: &'a str,
    pub(crate) ticket: &'a str,
    /// The form's target: `/oauth/authorize`, relative to the page.
    pub(crate) action: &'a str,
}

/// Before an identity is linked to the account whose address it gave:
/// that account's password.
#[derive(Template)]
#[template(path = "link_confirm.html")]
pub(crate) struct LinkConfirmPage<'a> {
    pub(crate) provider: &'a str,
    pub(crate) username: &'a str,
    pub(crate) csrf: &'a str,
    pub(crate) handle: &'a str,
    pub(crate) error: Option<&'a str>,
}

/// The OAuth 1.0 approval form (RFC 5849 §2.2).
#[derive(Template)]
#[template(path = "oauth1_approve.html")]
pub(crate) struct OAuth1ApprovePage<'a> {
    pub(crate) consumer: &'a str,
    pub(crate) scopes: &'a [String],
    pub(crate) token: &'a str,
    pub(crate) csrf: &'a str,
}

/// `page` rendered with `status` and the pages' headers. A template that
/// fails to render (it cannot, short of a bug) is a plain 500.
pub(crate) fn html(status: StatusCode, page: &impl Template) -> Response {
    let body = match page.render() {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(cause = %e, "page rendering failed");
            return response::no_store(StatusCode::INTERNAL_SERVER_ERROR.into_response());
        }
    };
    let mut resp = (status, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    page_headers(h);
    response::no_store(resp)
}

/// The headers every page and every redirect of the sign-in flow carries.
pub(crate) fn page_headers(h: &mut axum::http::HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(PAGE_CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
}

/// An error page.
pub(crate) fn error(status: StatusCode, heading: &str, message: &str) -> Response {
    html(status, &ErrorPage { heading, message })
}
