//! A parsed `.proto` file's names, bounded (see [`crate::schema::names`]) before its
//! descriptor pool is built: the package, every declared full name, every type reference and
//! every option name. The pool's builder adds each prefix of the package as a name and tries a
//! relative reference in each enclosing scope, copying both; the parse before it is linear.

use prost_reflect::prost_types::{
    DescriptorProto, EnumDescriptorProto, FieldDescriptorProto, FileDescriptorProto,
    UninterpretedOption,
};

use crate::schema::names::Extent;

/// Whether every name of `file` is within the bounds, or the first that is not.
pub(super) fn within_bounds(file: &FileDescriptorProto) -> Result<(), String> {
    let package = file.package();
    let scope = Extent::of(package).within("the package", package)?;
    if let Some(o) = &file.options {
        options(&o.uninterpreted_option)?;
    }
    for m in &file.message_type {
        message(m, scope)?;
    }
    for e in &file.enum_type {
        enumeration(e, scope)?;
    }
    for f in &file.extension {
        field(f, scope, "extension")?;
    }
    for s in &file.service {
        let inner = scope.join(s.name()).within("service", s.name())?;
        if let Some(o) = &s.options {
            options(&o.uninterpreted_option)?;
        }
        for m in &s.method {
            inner.join(m.name()).within("method", m.name())?;
            reference(m.input_type(), "input type")?;
            reference(m.output_type(), "output type")?;
            if let Some(o) = &m.options {
                options(&o.uninterpreted_option)?;
            }
        }
    }
    Ok(())
}

fn message(m: &DescriptorProto, scope: Extent) -> Result<(), String> {
    let inner = scope.join(m.name()).within("message", m.name())?;
    if let Some(o) = &m.options {
        options(&o.uninterpreted_option)?;
    }
    for f in &m.field {
        field(f, inner, "field")?;
    }
    for f in &m.extension {
        field(f, inner, "extension")?;
    }
    for o in &m.oneof_decl {
        inner.join(o.name()).within("oneof", o.name())?;
        if let Some(opts) = &o.options {
            options(&opts.uninterpreted_option)?;
        }
    }
    for r in &m.extension_range {
        if let Some(o) = &r.options {
            options(&o.uninterpreted_option)?;
        }
    }
    for n in &m.nested_type {
        message(n, inner)?;
    }
    for e in &m.enum_type {
        enumeration(e, inner)?;
    }
    Ok(())
}

fn enumeration(e: &EnumDescriptorProto, scope: Extent) -> Result<(), String> {
    scope.join(e.name()).within("enum", e.name())?;
    if let Some(o) = &e.options {
        options(&o.uninterpreted_option)?;
    }
    for v in &e.value {
        // A value's full name is in its enum's scope, beside the enum.
        scope.join(v.name()).within("enum value", v.name())?;
        if let Some(o) = &v.options {
            options(&o.uninterpreted_option)?;
        }
    }
    Ok(())
}

fn field(f: &FieldDescriptorProto, scope: Extent, what: &str) -> Result<(), String> {
    scope.join(f.name()).within(what, f.name())?;
    // A scalar's type name is empty.
    reference(f.type_name(), "type")?;
    reference(f.extendee(), "extendee")?;
    if let Some(o) = &f.options {
        options(&o.uninterpreted_option)?;
    }
    Ok(())
}

/// A reference is resolved in each enclosing scope: its own length and parts are bounded, so
/// each candidate is at most twice a full name.
fn reference(name: &str, what: &str) -> Result<(), String> {
    Extent::of(name).within(what, name).map(drop)
}

/// An option's name (`(my.ext).field`) is resolved like a reference, from its scope.
fn options(list: &[UninterpretedOption]) -> Result<(), String> {
    for o in list {
        let name = o.name.iter().fold(Extent::default(), |name, part| {
            name.join(part.name_part.trim_start_matches('(').trim_end_matches(')'))
        });
        let last = o.name.last().map_or("", |p| p.name_part.as_str());
        name.within("option", last)?;
    }
    Ok(())
}
