//! A configuration file cut at its `[[tenants]]` headers, so that a file of 100,000 tenants is
//! read a tenant at a time.
//!
//! Read whole, such a file (17 MB) became a 360 MB document tree for a moment, and the tenants'
//! configs, allocated among its nodes, kept glibc from giving the freed tree back: 185 MB stayed
//! resident for 45 MB of configs. Cut first — TOML's own lexer and parser find the headers, so a
//! `[[tenants]]` inside a string is not one — each tenant's table is a document of its own, and
//! what one leaves free the next reuses.
//!
//! Only the plain layout is cut: every `[[tenants]]` header written bare, nothing else under
//! `tenants`. Anything else (a quoted header, `[tenants.x]`, `tenants = [...]` beside the
//! headers, a syntax error) is read whole by the caller, so every answer, and every error
//! message, is what reading the whole document gives.

use toml_parser::decoder::Encoding;
use toml_parser::parser::EventReceiver;
use toml_parser::{ErrorSink, ParseError, Source, Span};

/// The document without its tenants, and each tenant's table as a document of its own.
#[derive(Debug)]
pub(super) struct Split<'t> {
    pub rest: String,
    pub tenants: Vec<&'t str>,
}

/// Cuts `text` at its top-level headers; `None` when it must be read whole.
pub(super) fn split(text: &str) -> Option<Split<'_>> {
    let source = Source::new(text);
    let tokens = source.lex().into_vec();
    let mut headers = Headers {
        text,
        found: Vec::new(),
        open: None,
        first_key: None,
        unsure: false,
    };
    let mut errors: Vec<ParseError> = Vec::new();
    toml_parser::parser::parse_document(&tokens, &mut headers, &mut errors);
    drop(tokens);
    if !errors.is_empty() || headers.unsure {
        return None;
    }
    let mut rest = String::new();
    let mut tenants = Vec::new();
    let mut starts = headers.found.iter().map(|h| h.start).peekable();
    rest.push_str(&text[..starts.peek().copied().unwrap_or(text.len())]);
    for header in &headers.found {
        starts.next();
        let end = starts.peek().copied().unwrap_or(text.len());
        let part = text.get(header.start..end)?;
        if header.tenant {
            tenants.push(part);
        } else {
            rest.push_str(part);
        }
    }
    Some(Split { rest, tenants })
}

#[derive(Debug)]
struct Header {
    /// Where its `[` is.
    start: usize,
    /// A bare `[[tenants]]`.
    tenant: bool,
}

/// Collects the top-level headers, and whether any of them is one this cut does not handle.
#[derive(Debug)]
struct Headers<'t> {
    text: &'t str,
    found: Vec<Header>,
    /// The header being read: where it opened, whether as an array of tables, its keys.
    open: Option<(usize, bool, usize)>,
    first_key: Option<(Span, Option<Encoding>)>,
    unsure: bool,
}

impl Headers<'_> {
    fn close(&mut self) {
        let Some((start, array, keys)) = self.open.take() else {
            return;
        };
        let (tenants_key, quoted) = match self.first_key.take() {
            Some((span, encoding)) => (
                self.text.get(span.start()..span.end()) == Some("tenants"),
                encoding.is_some(),
            ),
            None => (false, false),
        };
        let tenant = array && keys == 1 && tenants_key && !quoted;
        // A quoted first key might say `tenants`, and `[tenants.x]` belongs to a tenant: such
        // a document is read whole.
        if quoted || (tenants_key && !tenant) {
            self.unsure = true;
        }
        self.found.push(Header { start, tenant });
    }
}

impl EventReceiver for Headers<'_> {
    fn std_table_open(&mut self, span: Span, _error: &mut dyn ErrorSink) {
        self.open = Some((span.start(), false, 0));
    }
    fn std_table_close(&mut self, _span: Span, _error: &mut dyn ErrorSink) {
        self.close();
    }
    fn array_table_open(&mut self, span: Span, _error: &mut dyn ErrorSink) {
        self.open = Some((span.start(), true, 0));
    }
    fn array_table_close(&mut self, _span: Span, _error: &mut dyn ErrorSink) {
        self.close();
    }
    fn simple_key(&mut self, span: Span, kind: Option<Encoding>, _error: &mut dyn ErrorSink) {
        if let Some((_, _, keys)) = self.open.as_mut() {
            if *keys == 0 {
                self.first_key = Some((span, kind));
            }
            *keys += 1;
        }
    }
}
