//! The scanner's globals and calls: `GLOBAL`, `STACK_GLOBAL`, `INST`, `OBJ`, `REDUCE`,
//! `NEWOBJ(_EX)`, `BUILD`, `EXT*` and persistent ids, each recorded with its offset and
//! judged, and what a container format's hooks say follows a `BUILD`. Hand-written with
//! the scanner.

use super::super::allow::{table, WoKind};
use super::super::names;
use super::super::sym::{Made, Obj, S};
use super::super::{
    scan_pickle, CallKind, CallRef, Callee, Capture, FaultKind, GlobalRef, Inline, InlineData,
    ScanOptions, StorageId, Unresolved, Watch, MAX_OFFSETS,
};
use super::{Halt, Key, Step, Walker, Why, ENTRY};
use crate::read::op;

/// The `copyreg` helpers whose first argument is the class of the object they make.
const RECONSTRUCTORS: [&str; 4] = [
    "copyreg._reconstructor",
    "copy_reg._reconstructor",
    "copyreg.__newobj__",
    "copyreg.__newobj_ex__",
];

impl<'a> Walker<'a> {
    /// Records a reference to the global `module.name` and returns its value.
    fn global(&mut self, module: &str, name: &str, opcode: &'static str) -> Result<S, Halt> {
        let key = (module.to_string(), name.to_string());
        if let Some(&i) = self.global_index.get(&key) {
            let g = &mut self.out.globals[i as usize];
            g.count += 1;
            if g.offsets.len() < MAX_OFFSETS {
                g.offsets.push(self.op_start);
            }
            return Ok(S::Global(i));
        }
        self.charge(4 * ENTRY + 3 * (module.len() + name.len()) as u64)?;
        let i = u32::try_from(self.out.globals.len())
            .map_err(|_| self.halt(FaultKind::Limit, "more than 2^32 globals"))?;
        let kind = match table().weights_only(module, name) {
            Ok(k) => Some(k),
            Err(why) => {
                self.refuse_wo(why);
                None
            }
        };
        self.out.globals.push(GlobalRef {
            module: key.0.clone(),
            name: key.1.clone(),
            opcode,
            count: 1,
            offsets: vec![self.op_start],
            danger: names::danger(module, name),
            weights_only: kind.is_some(),
        });
        self.global_kind.push(kind);
        let path = format!("{module}.{name}");
        self.reconstructors
            .push(RECONSTRUCTORS.contains(&path.as_str()));
        self.global_index.insert(key, i);
        Ok(S::Global(i))
    }

    /// `module.name` of a recorded global.
    fn path(&self, i: u32) -> String {
        let g = &self.out.globals[i as usize];
        format!("{}.{}", g.module, g.name)
    }

    /// How the weights-only unpickler treats what `s` names, when it is an allowed global.
    pub(super) fn wo_kind(&self, s: S) -> Option<WoKind> {
        match s {
            S::Global(i) => self.global_kind.get(i as usize).copied().flatten(),
            _ => None,
        }
    }

    /// Two text lines of a global's module and name (`GLOBAL`, `INST`).
    fn names(&mut self) -> Result<Option<(String, String)>, Halt> {
        let m = self.line()?;
        let n = self.line()?;
        match (std::str::from_utf8(m), std::str::from_utf8(n)) {
            (Ok(m), Ok(n)) => Ok(Some((m.to_string(), n.to_string()))),
            _ => {
                self.fault(FaultKind::Malformed, "a global's name is not UTF-8");
                Ok(None)
            }
        }
    }

    pub(super) fn global_op(&mut self) -> Step {
        match self.names()? {
            Some((m, n)) => {
                let g = self.global(&m, &n, "GLOBAL")?;
                self.push(g)
            }
            None => self.push(S::Inert),
        }
    }

    /// `STACK_GLOBAL`: module and name from the stack, resolved when both are texts;
    /// values the scanner cannot name make it unresolved (dangerous).
    pub(super) fn stack_global(&mut self) -> Step {
        let name = self.pop();
        let module = self.pop();
        if let (Some(m), Some(n)) = (self.text_of(module), self.text_of(name)) {
            let (m, n) = (m.into_owned(), n.into_owned());
            let g = self.global(&m, &n, "STACK_GLOBAL")?;
            return self.push(g);
        }
        // Python refuses anything but two str.
        let refused = |s: S| {
            matches!(
                s,
                S::None | S::Bool(_) | S::Int(_) | S::BigInt | S::Float | S::Bytes(_)
            )
        };
        if refused(module) || refused(name) || self.is_container(module) || self.is_container(name)
        {
            self.fault(FaultKind::Malformed, "STACK_GLOBAL requires two str");
            return self.push(S::Inert);
        }
        let what = format!(
            "STACK_GLOBAL of {} and {}, which the scanner cannot resolve",
            self.describe(module),
            self.describe(name)
        );
        self.unresolved(what)
    }

    /// Whether `s` is a tuple, list, dict or set.
    fn is_container(&self, s: S) -> bool {
        matches!(self.obj_of(s), Some(o) if !matches!(o, Obj::Made(_)))
    }

    /// What `s` is, in a message.
    fn describe(&self, s: S) -> String {
        match s {
            S::Text(_) => "a text that is not UTF-8".into(),
            S::Global(i) => format!("the global {}", self.path(i)),
            S::Obj(_) if !self.is_container(s) => "a value another call returned".into(),
            S::Persistent => "a persistent object".into(),
            S::Opaque => "an unresolved value".into(),
            S::Inert => "a value lost to a fault".into(),
            _ => "another value".into(),
        }
    }

    /// Records what cannot be resolved and pushes a value that stands for it.
    fn unresolved(&mut self, what: String) -> Step {
        self.charge(ENTRY + what.len() as u64)?;
        self.out.unresolved.push(Unresolved {
            offset: self.op_start,
            what,
        });
        self.push(S::Opaque)
    }

    /// `EXT1`, `EXT2`, `EXT4`: a code of `copyreg`'s extension registry, which is the
    /// loading process's state: unresolved.
    pub(super) fn ext(&mut self, code: u8) -> Step {
        let n = match code {
            op::EXT1 => self.fixed::<1>()?[0] as u32,
            op::EXT2 => u16::from_le_bytes(self.fixed::<2>()?) as u32,
            _ => u32::from_le_bytes(self.fixed::<4>()?),
        };
        let name = super::op_name(code);
        self.unresolved(format!(
            "{name} code {n}: a global of copyreg's extension registry, which cannot be verified"
        ))
    }

    /// A tuple of `items`, for a call's arguments.
    fn args_tuple(&mut self, items: Vec<S>) -> Result<S, Halt> {
        let n = items.len();
        self.obj(Obj::Tuple(items), n)
    }

    /// Records a call of `f` (`REDUCE`, `NEWOBJ`, `INST`, `OBJ`) and pushes what it makes:
    /// an object, or an inert value when `f` is not callable (Python fails there).
    fn call(&mut self, kind: CallKind, f: S, args: S) -> Step {
        let (key, why) = match f {
            S::Global(i) => (Key::Global(i), Why::OfGlobal(i)),
            S::Obj(_) if !self.is_container(f) => (
                Key::Computed,
                Why::Fixed("calls a value another call returned, which cannot be verified"),
            ),
            S::Persistent => (
                Key::Persistent,
                Why::Fixed("calls an object persistent_load returned"),
            ),
            S::Opaque => (
                Key::Unresolved,
                Why::Fixed("calls a value the scanner could not resolve"),
            ),
            S::Inert => return self.push(S::Inert),
            _ => {
                let name = kind.opcode();
                self.fault(
                    FaultKind::Malformed,
                    format!("{name} of a value that is not callable"),
                );
                return self.push(S::Inert);
            }
        };
        self.record(kind, key, why)?;
        if let Some(g) = self.watched(f, Watch::Args) {
            let mut nodes = 0;
            let args_value = self.copy(args, 0, &mut nodes);
            self.out.captures.push(Capture {
                offset: self.op_start,
                callee: g,
                args: args_value,
            });
        }
        let made = self.obj(
            Obj::Made(Made {
                callee: f,
                args,
                state: None,
            }),
            2,
        )?;
        self.push(made)
    }

    /// `module.name` of `f` when it is a global the hooks watch for `what`.
    fn watched(&self, f: S, what: Watch) -> Option<String> {
        let (S::Global(i), Some(h)) = (f, self.opts.hooks) else {
            return None;
        };
        let g = &self.out.globals[i as usize];
        (h.watch(&g.module, &g.name) == what).then(|| self.path(i))
    }

    /// Records one call by `kind` of what `key` names; the first of its kind is described
    /// (its callee's name, why it is dangerous), the others counted.
    fn record(&mut self, kind: CallKind, key: Key, why: Why) -> Step {
        if let Some(&i) = self.call_index.get(&(kind, key)) {
            let c = &mut self.out.calls[i];
            c.count += 1;
            if c.offsets.len() < MAX_OFFSETS {
                c.offsets.push(self.op_start);
            }
            return Ok(());
        }
        self.charge(4 * ENTRY)?;
        let callee = match key {
            Key::Global(i) => Callee::Global(self.path(i)),
            Key::Computed => Callee::Computed,
            Key::Persistent => Callee::Persistent,
            Key::Unresolved => Callee::Unresolved,
        };
        let danger = match why {
            Why::OfGlobal(i) => self.out.globals[i as usize].danger.clone(),
            Why::ChangesGlobal(i) => Some(format!(
                "{} changes the state of the global {} itself",
                kind.opcode(),
                self.path(i)
            )),
            Why::Fixed(s) => Some(s.to_string()),
        };
        self.call_index.insert((kind, key), self.out.calls.len());
        self.out.calls.push(CallRef {
            kind,
            callee,
            count: 1,
            offsets: vec![self.op_start],
            danger,
        });
        Ok(())
    }

    /// Records the call of a method of `target` that an opcode makes (`BUILD`'s
    /// `__setstate__`, `APPENDS`' `extend`, `SETITEMS`' `__setitem__`, `ADDITEMS`' `add`),
    /// named by the class of the object when it is known.
    pub(super) fn method_call(&mut self, kind: CallKind, target: S) {
        let (key, why) = match target {
            S::Obj(j) => match &self.objs[j as usize] {
                Obj::Made(m) => match self.class_of(m) {
                    Some(c) => (Key::Global(c), Why::OfGlobal(c)),
                    None => (
                        Key::Computed,
                        Why::Fixed("a method of an object whose class cannot be verified"),
                    ),
                },
                _ => {
                    let name = kind.opcode();
                    self.fault(FaultKind::Malformed, format!("{name} on a plain container"));
                    return;
                }
            },
            S::Global(i) => (Key::Global(i), Why::ChangesGlobal(i)),
            S::Persistent => (
                Key::Persistent,
                Why::Fixed("a method of an object persistent_load returned"),
            ),
            S::Opaque => (
                Key::Unresolved,
                Why::Fixed("a method of a value the scanner could not resolve"),
            ),
            S::Inert => return,
            _ => {
                let name = kind.opcode();
                self.fault(FaultKind::Malformed, format!("{name} on a plain value"));
                return;
            }
        };
        // A charge past the budget ends reading at the next opcode that allocates.
        let _ = self.record(kind, key, why);
    }

    /// The class of an object a call made: the global called, or the class a `copyreg`
    /// reconstructor was given.
    fn class_of(&self, m: &Made) -> Option<u32> {
        let S::Global(g) = m.callee else {
            return None;
        };
        if self.reconstructors.get(g as usize) == Some(&true) {
            if let Some(Obj::Tuple(items)) = self.obj_of(m.args) {
                if let Some(&S::Global(c)) = items.first() {
                    return Some(c);
                }
            }
        }
        Some(g)
    }

    /// `INST`: a global named inline, called with the values above the mark.
    pub(super) fn inst(&mut self) -> Step {
        let names = self.names()?;
        let items = self.pop_mark();
        let Some((m, n)) = names else {
            return self.push(S::Inert);
        };
        let g = self.global(&m, &n, "INST")?;
        let args = self.args_tuple(items)?;
        self.call(CallKind::Inst, g, args)
    }

    /// `OBJ`: the first value above the mark called with the others.
    pub(super) fn obj_op(&mut self) -> Step {
        let mut items = self.pop_mark();
        if items.is_empty() {
            self.fault(FaultKind::Malformed, "OBJ with nothing above its MARK");
            return self.push(S::Inert);
        }
        let cls = items.remove(0);
        let args = self.args_tuple(items)?;
        self.call(CallKind::Obj, cls, args)
    }

    /// `REDUCE`: `callable(*args)`.
    pub(super) fn reduce(&mut self) -> Step {
        let args = self.pop();
        let f = self.pop();
        if matches!(self.wo_kind(f), None | Some(WoKind::Value)) {
            self.refuse_wo("REDUCE of a value outside its allowlist".into());
        }
        self.call(CallKind::Reduce, f, args)
    }

    /// `NEWOBJ`, `NEWOBJ_EX`: `cls.__new__(cls, *args, **kwargs)`.
    pub(super) fn newobj(&mut self, code: u8) -> Step {
        if code == op::NEWOBJ_EX {
            self.pop();
        }
        let args = self.pop();
        let cls = self.pop();
        if !matches!(self.wo_kind(cls), Some(WoKind::Class | WoKind::Mapping)) {
            self.refuse_wo("NEWOBJ of a value that is not an allowed class".into());
        }
        let kind = match code {
            op::NEWOBJ => CallKind::NewObj,
            _ => CallKind::NewObjEx,
        };
        self.call(kind, cls, args)
    }

    /// `BUILD`: the object's `__setstate__` (or its `__dict__` updated), then what the
    /// hooks say follows.
    pub(super) fn build(&mut self) -> Step {
        let state = self.pop();
        let inst = self.top()?;
        let maker = match self.obj_of(inst) {
            Some(Obj::Made(m)) => Some(m.callee),
            _ => None,
        };
        if !matches!(
            maker.and_then(|f| self.wo_kind(f)),
            Some(WoKind::Class | WoKind::Mapping | WoKind::Tensor)
        ) {
            self.refuse_wo("BUILD on an object outside its allowlist".into());
        }
        self.method_call(CallKind::Build, inst);
        if let S::Obj(j) = inst {
            if let Obj::Made(m) = &mut self.objs[j as usize] {
                m.state = Some(state);
            }
        }
        match maker.and_then(|f| self.watched(f, Watch::Build).map(|g| (f, g))) {
            Some((_, g)) => self.inline(&g, state),
            None => Ok(()),
        }
    }

    /// What follows the `BUILD` of an object of the watched global `g`, given its state.
    fn inline(&mut self, g: &str, state: S) -> Step {
        let Some(hooks) = self.opts.hooks else {
            return Ok(());
        };
        let mut nodes = 0;
        let state = self.copy(state, 0, &mut nodes);
        let (module, name) = g.rsplit_once('.').unwrap_or(("", g));
        match hooks.after_build(module, name, &state) {
            Inline::Nothing => Ok(()),
            Inline::Skip { padded, len } => {
                if padded {
                    let [pad] = self.fixed::<1>()?;
                    self.take(pad as u64)?;
                }
                let offset = self.pos;
                self.take(len)?;
                self.out.inline.push(InlineData {
                    offset,
                    len,
                    owner: g.to_string(),
                });
                self.set_top(S::Inert)
            }
            Inline::Pickle => self.inline_pickle(g),
            Inline::Invalid(why) => Err(self.halt(FaultKind::Malformed, why)),
        }
    }

    /// A whole pickle read inline (joblib's array of objects), scanned as one.
    fn inline_pickle(&mut self, g: &str) -> Step {
        let opts = ScanOptions {
            limits: self.opts.limits,
            storages: false,
            keep_result: false,
            hooks: None,
            depth: self.opts.depth + 1,
        };
        let nested = scan_pickle(self.data, self.pos, &opts);
        let (end, complete) = (nested.end, nested.complete);
        self.out.nested.push(nested);
        if !complete {
            return Err(self.halt(
                FaultKind::Malformed,
                format!("the pickle inline after the BUILD of {g} does not end"),
            ));
        }
        self.pos = end;
        self.set_top(S::Inert)
    }

    /// `PERSID`, `BINPERSID`: a persistent id, torch's storage form or another.
    pub(super) fn persid(&mut self, code: u8) -> Step {
        let pid = match code {
            op::PERSID => {
                let l = self.line()?;
                let text = String::from_utf8_lossy(l).into_owned();
                self.other_id(format!("the text {text:?}"))?;
                return self.push(S::Persistent);
            }
            _ => self.pop(),
        };
        if !self.opts.storages {
            self.refuse_wo("a persistent id, which only a checkpoint's loader resolves".into());
        }
        match self.storage_id(pid) {
            Some(id) => {
                self.charge(ENTRY + 64)?;
                self.out.storage_ids.push(id);
            }
            None => {
                self.refuse_wo("a persistent id that is not ('storage', ...)".into());
                let what = self.describe(pid);
                self.other_id(what)?;
            }
        }
        self.push(S::Persistent)
    }

    fn other_id(&mut self, what: String) -> Step {
        self.charge(ENTRY + what.len() as u64)?;
        self.out.other_ids.push((self.op_start, what));
        Ok(())
    }

    /// The id when it is torch's `('storage', class, key, location, numel, ...)`.
    fn storage_id(&self, pid: S) -> Option<StorageId> {
        let Some(Obj::Tuple(items)) = self.obj_of(pid) else {
            return None;
        };
        let tag = match items.first()? {
            S::Text(i) | S::Bytes(i) => {
                let l = &self.leaves[*i as usize];
                match l.bytes() {
                    Some(b) => b.get(self.data) == b"storage",
                    None => l.text(self.data).is_some_and(|t| t == "storage"),
                }
            }
            _ => false,
        };
        if !tag {
            return None;
        }
        Some(StorageId {
            offset: self.op_start,
            class: match items.get(1) {
                Some(&S::Global(g)) => Some(self.path(g)),
                _ => None,
            },
            key: items
                .get(2)
                .and_then(|&k| self.text_of(k))
                .map(|t| t.into_owned()),
            numel: match items.get(4) {
                Some(&S::Int(n)) => Some(n),
                _ => None,
            },
        })
    }
}
