//! How `tensorfmt scan` prints what it found: a table per file, or one JSON document.
//! Names read from the files are printed escaped (control and invisible characters).
//! Hand-written with the scanner (see `scan.rs`).

use std::io::Write;

use serde_json::{json, Value};

use super::{FileScan, Finding, Found};
use crate::runtime::error::escape_controls;
use crate::runtime::pickle::{PickleScan, Verdict};

/// Offsets, comma-separated, with how many more there are.
fn offsets(list: &[usize], count: u64) -> String {
    let mut s: Vec<String> = list.iter().map(|o| o.to_string()).collect();
    if count > list.len() as u64 {
        s.push(format!("+{} more", count - list.len() as u64));
    }
    s.join(", ")
}

/// The scans as a table: per file its verdict, then per pickle its globals (count and
/// offsets), its dangerous calls, what it could not resolve, its faults, and the
/// findings around the pickles.
pub fn print_table(scans: &[FileScan], out: &mut dyn Write) -> crate::Result<()> {
    for f in scans {
        let torch = match f.torch_weights_only {
            Some(true) => ", torch.load(weights_only=True) accepts it",
            Some(false) => ", torch.load(weights_only=True) refuses it",
            None => "",
        };
        writeln!(
            out,
            "{}: {} ({}, {} pickle{}{torch})",
            escape_controls(&f.path),
            f.verdict().label(),
            f.kind,
            f.pickles.len(),
            if f.pickles.len() == 1 { "" } else { "s" }
        )?;
        for p in &f.pickles {
            pickle_table(p, out)?;
        }
        for x in &f.findings {
            writeln!(
                out,
                "  {}: {}: {}",
                finding_label(x),
                escape_controls(&x.place.to_string()),
                escape_controls(&x.message)
            )?;
        }
    }
    Ok(())
}

fn finding_label(x: &Finding) -> &'static str {
    match x.severity {
        Verdict::DataOnly => "note",
        v => v.label(),
    }
}

fn pickle_table(p: &Found, out: &mut dyn Write) -> crate::Result<()> {
    let s = &p.scan;
    let part = p.part.map(|x| format!(" ({x})")).unwrap_or_default();
    let proto = s
        .protocol
        .map(|x| format!(", protocol {x}"))
        .unwrap_or_default();
    writeln!(
        out,
        "  pickle at {}{part}: {}{proto}, {} opcodes",
        escape_controls(&p.place.to_string()),
        s.own_verdict().label(),
        s.ops
    )?;
    for g in &s.globals {
        let how = match (&g.danger, g.weights_only) {
            (Some(d), _) => format!("DANGEROUS: {d}"),
            (None, true) => "weights-only allowlist".into(),
            (None, false) => "imported".into(),
        };
        writeln!(
            out,
            "    global  {}.{}  x{}  at {}  {}",
            escape_controls(&g.module),
            escape_controls(&g.name),
            g.count,
            offsets(&g.offsets, g.count),
            escape_controls(&how)
        )?;
    }
    for c in s.calls.iter().filter(|c| c.danger.is_some()) {
        writeln!(
            out,
            "    call    {} {}  x{}  at {}  DANGEROUS: {}",
            c.kind.opcode(),
            escape_controls(&c.callee.to_string()),
            c.count,
            offsets(&c.offsets, c.count),
            escape_controls(c.danger.as_deref().unwrap_or_default())
        )?;
    }
    pickle_extras(s, out)
}

fn pickle_extras(s: &PickleScan, out: &mut dyn Write) -> crate::Result<()> {
    for u in &s.unresolved {
        writeln!(
            out,
            "    unresolved at {}: DANGEROUS: {}",
            u.offset,
            escape_controls(&u.what)
        )?;
    }
    for (at, what) in &s.other_ids {
        writeln!(out, "    persistent id at {at}: {}", escape_controls(what))?;
    }
    if !s.buffers.is_empty() {
        let b: Vec<String> = s.buffers.iter().map(|b| b.to_string()).collect();
        writeln!(
            out,
            "    out-of-band buffers (NEXT_BUFFER) at {}",
            b.join(", ")
        )?;
    }
    if !s.inline.is_empty() {
        let bytes: u64 = s.inline.iter().map(|d| d.len).sum();
        writeln!(
            out,
            "    {} arrays stepped over inline ({bytes} bytes)",
            s.inline.len()
        )?;
    }
    for f in &s.faults {
        writeln!(
            out,
            "    fault at {}: {}",
            f.offset,
            escape_controls(&f.message)
        )?;
    }
    if s.fault_count > s.faults.len() as u64 {
        writeln!(
            out,
            "    and {} more faults",
            s.fault_count - s.faults.len() as u64
        )?;
    }
    if let (Verdict::NeedsGlobals, Some((at, why))) = (s.own_verdict(), &s.torch_refusal) {
        writeln!(
            out,
            "    torch.load(weights_only=True) refuses it at {at}: {}",
            escape_controls(why)
        )?;
    }
    Ok(())
}

/// The scans as one JSON document: `{"verdict", "exit_code", "files": [{"path",
/// "kind", "verdict", "exit_code", "torch_weights_only", "pickles": [...],
/// "findings": [...]}]}`.
pub fn print_json(scans: &[FileScan], out: &mut dyn Write) -> crate::Result<()> {
    let worst = scans
        .iter()
        .map(FileScan::verdict)
        .max()
        .unwrap_or(Verdict::DataOnly);
    let files: Vec<Value> = scans.iter().map(file_json).collect();
    let doc = json!({
        "verdict": worst.label(),
        "exit_code": worst.exit_code(),
        "files": files,
    });
    let text = serde_json::to_string_pretty(&doc)
        .map_err(|e| crate::Error::from(crate::ErrorKind::Invalid(e.to_string())))?;
    writeln!(out, "{text}")?;
    Ok(())
}

fn place_json(p: &super::Place) -> Value {
    json!({"member": p.member, "nested": p.nested, "offset": p.offset})
}

fn file_json(f: &FileScan) -> Value {
    let v = f.verdict();
    json!({
        "path": f.path,
        "kind": f.kind,
        "verdict": v.label(),
        "exit_code": v.exit_code(),
        "torch_weights_only": f.torch_weights_only,
        "pickles": f.pickles.iter().map(pickle_json).collect::<Vec<_>>(),
        "findings": f.findings.iter().map(|x| json!({
            "severity": x.severity.label(),
            "where": place_json(&x.place),
            "message": x.message,
        })).collect::<Vec<_>>(),
    })
}

fn pickle_json(p: &Found) -> Value {
    let s = &p.scan;
    json!({
        "where": place_json(&p.place),
        "part": p.part,
        "verdict": s.own_verdict().label(),
        "protocol": s.protocol,
        "end": s.end,
        "complete": s.complete,
        "opcodes": s.ops,
        "torch_weights_only": s.torch_refusal.is_none() && s.complete,
        "torch_refusal": s.torch_refusal.as_ref().map(|(at, why)| json!({"offset": at, "reason": why})),
        "globals": s.globals.iter().map(|g| json!({
            "module": g.module, "name": g.name, "opcode": g.opcode, "count": g.count,
            "offsets": g.offsets, "danger": g.danger, "weights_only": g.weights_only,
        })).collect::<Vec<_>>(),
        "calls": s.calls.iter().map(|c| json!({
            "opcode": c.kind.opcode(), "callee": c.callee.to_string(), "count": c.count,
            "offsets": c.offsets, "danger": c.danger,
        })).collect::<Vec<_>>(),
        "unresolved": s.unresolved.iter().map(|u| json!({"offset": u.offset, "what": u.what})).collect::<Vec<_>>(),
        "storage_ids": s.storage_ids.len(),
        "other_persistent_ids": s.other_ids.iter().map(|(at, w)| json!({"offset": at, "what": w})).collect::<Vec<_>>(),
        "buffers": s.buffers,
        "inline_data": s.inline.iter().map(|d| json!({"offset": d.offset, "len": d.len, "owner": d.owner})).collect::<Vec<_>>(),
        "faults": s.faults.iter().map(|f| json!({"offset": f.offset, "kind": format!("{:?}", f.kind).to_lowercase(), "message": f.message})).collect::<Vec<_>>(),
        "fault_count": s.fault_count,
    })
}
