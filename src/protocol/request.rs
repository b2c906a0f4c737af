//! One client request as the gateway carries it from the edge to the
//! upstream: its id, its [`Method`], and its params, parsed at most once.
//!
//! The edge builds a [`Request`] from the envelope it parsed. Whoever
//! first needs the params' members (the modern edge's checks, or the
//! router) parses them; everyone after reads the same [`Params`], and the
//! router takes them to build what the upstream receives. Members the
//! gateway does not look into (`arguments`) stay raw JSON throughout.

use serde_json::value::RawValue;

use super::checked::Member;
use super::params::{Params, ParamsError};
use super::{Method, Raw};

/// A client request; see the module header.
pub(crate) struct Request<'a> {
    pub(crate) id: &'a RawValue,
    pub(crate) method: Method,
    raw: Option<Raw<'a>>,
    /// The params' members, when the message's one-pass read found them.
    found: Option<Vec<Member<'a>>>,
    parsed: Parsed<'a>,
}

enum Parsed<'a> {
    Not,
    Done(Result<Params<'a>, ParamsError>),
    /// The router took them to build the upstream's params.
    Taken,
}

impl<'a> Request<'a> {
    pub(crate) fn new(id: &'a RawValue, method: Method, params: Option<Raw<'a>>) -> Self {
        Request {
            id,
            method,
            raw: params,
            found: None,
            parsed: Parsed::Not,
        }
    }

    /// The request with its params' members as the message's read found
    /// them (`None`: not found, they are looked for when first needed).
    pub(crate) fn with_members(mut self, found: Option<Vec<Member<'a>>>) -> Self {
        self.found = found;
        self
    }

    /// The params as the client sent them.
    pub(crate) fn raw_params(&self) -> Option<Raw<'a>> {
        self.raw
    }

    /// The params' members, parsed on first use.
    pub(crate) fn params(&mut self) -> Result<&Params<'a>, ParamsError> {
        if matches!(self.parsed, Parsed::Not) {
            self.parsed = Parsed::Done(Params::parse_found(self.raw, self.found.take()));
        }
        match &self.parsed {
            Parsed::Done(Ok(params)) => Ok(params),
            Parsed::Done(Err(e)) => Err(e.clone()),
            Parsed::Not | Parsed::Taken => {
                Err(ParamsError::Invalid("params were already handed on".into()))
            }
        }
    }

    /// Takes the params' members (parsing them if nobody has yet).
    pub(crate) fn take_params(&mut self) -> Result<Params<'a>, ParamsError> {
        let parsed = std::mem::replace(&mut self.parsed, Parsed::Taken);
        match parsed {
            Parsed::Not => Params::parse_found(self.raw, self.found.take()),
            Parsed::Done(result) => result,
            Parsed::Taken => Err(ParamsError::Invalid("params were already handed on".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).expect("json")
    }

    #[test]
    fn params_are_parsed_once_and_then_handed_on() {
        let id = raw("1");
        let params = raw(r#"{"name":"a","arguments":{"x":1}}"#);
        let mut request = Request::new(&id, Method::ToolsCall, Some(Raw::from(&*params)));
        let before = super::super::params::parses();
        assert_eq!(request.params().unwrap().string("name").unwrap(), "a");
        assert_eq!(
            request.params().unwrap().raw("arguments").unwrap().get(),
            r#"{"x":1}"#
        );
        let taken = request.take_params().unwrap();
        assert_eq!(taken.string("name").unwrap(), "a");
        assert_eq!(super::super::params::parses() - before, 1);
        assert!(
            request.params().is_err(),
            "taken params are not parsed again"
        );
    }

    #[test]
    fn a_params_error_is_kept() {
        let id = raw("1");
        let params = raw("[1]");
        let mut request = Request::new(&id, Method::ToolsCall, Some(Raw::from(&*params)));
        assert_eq!(request.params().err(), Some(ParamsError::NotAnObject));
        assert_eq!(request.take_params().err(), Some(ParamsError::NotAnObject));
    }
}
