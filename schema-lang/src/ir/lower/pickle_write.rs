//! Pickle write rules: the object a pickle entry writes (`write = collections.OrderedDict();`)
//! and the object of each tensor (a tensor mapping's `write`), lowered and checked in one
//! walk. A rule says less than other expressions: literals, `if`, `==` and `!=`, the
//! tensor's values, declared globals, calls of globals (positional arguments) and of the
//! persistent kind (items by name, in order), and the builtins `global(text)`,
//! `key_of(TABLE, dtype)` and `str(int)`; the pickle never holds the tensor's `dtype`.

use super::*;

/// True when a pickle write rule may say `e` at all (its parts are checked as they are
/// lowered).
pub(super) fn supported(e: &ast::Expr) -> bool {
    use ast::ExprKind as A;
    matches!(
        &e.kind,
        A::Int(_)
            | A::Bytes(_)
            | A::Unary {
                op: ast::UnaryOp::Neg,
                ..
            }
            | A::Str(_)
            | A::Bool(_)
            | A::None
            | A::If { .. }
            | A::Path(_)
            | A::Call { .. }
            | A::Binary {
                op: BinaryOp::Eq | BinaryOp::Ne,
                ..
            }
    )
}

impl Lower<'_> {
    /// Lowers the pickle write rule `e`: over a tensor (`tensor`: a mapping's `write`) or the
    /// root object of a pickle entry, whose codec names `pickle`.
    pub(super) fn pickle_write(
        &mut self,
        e: &ast::Expr,
        tensor: bool,
        pickle: Option<PickleId>,
    ) -> Expr {
        if self.ir.format(self.cur).pickles.is_empty() {
            self.error(
                e.span,
                "a pickle `write` rule needs a `pickle` declaration in the format",
            );
            return err_expr(e.span);
        }
        let x = self.expr(&Scope::PickleWrite { tensor, pickle }, e);
        self.held_dtypes(&x);
        self.unpicklable(&x);
        if tensor && self.ast_fmt().engine_kind() == "file" {
            self.placed_data(&x);
        }
        x
    }

    /// Reports the values a pickle cannot hold: the rule itself, an argument of a call, an
    /// item of a tuple or of a persistent id must be a global, an object, a number, text,
    /// a byte string, a truth value, `none` or a list of integers.
    fn unpicklable(&mut self, x: &Expr) {
        let held = |t: &Type| match t {
            Type::List(i) | Type::Tuple(i) => i.is_int(),
            Type::PickleObject(_)
            | Type::PickleGlobal(_)
            | Type::Int(_)
            | Type::Str
            | Type::Bytes
            | Type::Bool
            | Type::None
            | Type::Dtype
            | Type::Error => true,
            _ => false,
        };
        let mut bad = Vec::new();
        let mut check = |e: &Expr| {
            if !held(&e.ty) {
                bad.push((e.span, e.ty.clone()));
            }
        };
        check(x);
        x.walk(&mut |e| match &e.kind {
            ExprKind::Call {
                func: Builtin::Tuple | Builtin::Build,
                args,
            } => args.iter().for_each(|a| check(&a.value)),
            ExprKind::PickleCall { args, .. } | ExprKind::PersistentId { items: args, .. } => {
                args.iter().for_each(&mut check)
            }
            _ => {}
        });
        for (span, ty) in bad {
            let shown = self.show_ty(&ty);
            self.gap(
                span,
                format!("a pickle cannot hold {shown}"),
                "a pickle holds globals, calls, numbers, text, byte strings, truth values, \
                 `none` and the tensor's integers; compare to choose one \
                 (`order == fortran`, `if byte_order == be { \">\" } else { \"<\" }`)",
            );
        }
    }

    /// Reports the tensor's `data` (a `Value::Stream` of its bytes in a file that is one
    /// pickle) anywhere but as an item of `tuple(..)` or an argument of a call, where the
    /// pickle holds it as a byte string, and a rule without it.
    fn placed_data(&mut self, x: &Expr) {
        let data = |e: &Expr| matches!(e.kind, ExprKind::WriteVar(WriteVar::PickleData));
        let (mut placed, mut all) = (Vec::new(), Vec::new());
        x.walk(&mut |e| match &e.kind {
            ExprKind::Call {
                func: Builtin::Tuple | Builtin::Build,
                args,
            } => placed.extend(args.iter().filter(|a| data(&a.value)).map(|a| a.value.span)),
            ExprKind::PickleCall { args, .. } => {
                placed.extend(args.iter().filter(|a| data(a)).map(|a| a.span))
            }
            _ if data(e) => all.push(e.span),
            _ => {}
        });
        let mut failed = false;
        x.walk(&mut |e| failed |= e.kind == ExprKind::Error);
        if all.is_empty() && !failed {
            self.gap(
                x.span,
                "the write rule does not hold the tensor's `data`",
                "the pickle holds the array's bytes where the rule puts `data`: \
                 `tuple(1, shape, .., data)`",
            );
        }
        for span in all.into_iter().filter(|s| !placed.contains(s)) {
            self.gap(
                span,
                "the tensor's `data` is a byte string of the pickle, not a value to compute with",
                "put `data` as it is in a tuple or a call: `tuple(1, shape, .., data)`",
            );
        }
    }

    /// Reports the tensor's `dtype` wherever the pickle would hold it: anywhere but a side
    /// of `==` or `!=`, `key_of`'s second argument and `itemsize`'s argument.
    fn held_dtypes(&mut self, x: &Expr) {
        let dtype = |e: &Expr| matches!(e.kind, ExprKind::WriteVar(WriteVar::Dtype));
        let (mut named, mut all) = (Vec::new(), Vec::new());
        x.walk(&mut |e| match &e.kind {
            ExprKind::Binary {
                op: BinaryOp::Eq | BinaryOp::Ne,
                lhs,
                rhs,
            } => named.extend([lhs, rhs].into_iter().filter(|s| dtype(s)).map(|s| s.span)),
            ExprKind::Call {
                func: Builtin::KeyOf | Builtin::Itemsize,
                args,
            } => named.extend(
                args.iter()
                    .filter(|a| dtype(&a.value))
                    .map(|a| a.value.span),
            ),
            _ if dtype(e) => all.push(e.span),
            _ => {}
        });
        for span in all.into_iter().filter(|s| !named.contains(s)) {
            self.gap(
                span,
                "a pickle cannot hold the tensor's `dtype`",
                "a pickle names a dtype by a global: `global(key_of(TABLE, dtype))`",
            );
        }
    }

    /// [`Self::held_dtypes`] over the arguments of a call that is not kept (an unknown
    /// function, a persistent id's extra items), which the rule's walk does not see.
    fn held_dtypes_dropped(&mut self, args: Vec<Option<Expr>>) {
        for a in args.into_iter().flatten() {
            self.held_dtypes(&a);
        }
    }

    /// A call in a pickle write rule: `global(text)`, `str(int)`, `key_of(TABLE, dtype)`,
    /// the persistent kind with its items by name, or a declared global.
    pub(super) fn pickle_call(
        &mut self,
        tensor: bool,
        pickle: Option<PickleId>,
        callee: &[Ident],
        args: &[ast::Arg],
        span: Span,
    ) -> Expr {
        let sc = Scope::PickleWrite { tensor, pickle };
        let text = dotted(callee);
        match (text.as_str(), args) {
            ("global", [a]) if a.name.is_none() => {
                return self.builtin(&sc, Builtin::Global, args, span)
            }
            ("str", [a]) if a.name.is_none() => return self.builtin(&sc, Builtin::Str, args, span),
            ("key_of", [t, d]) if t.name.is_none() && d.name.is_none() => {
                return self.pickle_key_of(tensor, &t.value, &d.value, span)
            }
            ("itemsize", [d])
                if tensor && d.name.is_none() && d.value.path_name() == Some("dtype") =>
            {
                return self.builtin(&sc, Builtin::Itemsize, args, span)
            }
            ("tuple", _) => return self.pickle_tuple(&sc, pickle, args, span),
            ("build", _) => return self.pickle_build(&sc, pickle, args, span),
            _ => {}
        }
        let mut lowered: Vec<Option<Expr>> = args
            .iter()
            .map(|a| Some(self.expr(&sc, &a.value)))
            .collect();
        let persistent = self
            .pickles_in_reach(pickle)
            .find_map(|p| Some((p, self.ir.pickle(p).persistent.clone()?)))
            .filter(|(_, (kind, _))| *kind == text);
        if let Some((p, (kind, items))) = persistent {
            let names = args
                .iter()
                .map(|a| a.name.as_ref().map_or("", |n| n.name.as_str()));
            if !names.eq(items.iter().map(String::as_str)) {
                self.gap(
                    span,
                    format!("a `{kind}` persistent id names its items in order"),
                    format!("`{kind}({})`", items.join(" = .., ")),
                );
            }
            let items = items
                .iter()
                .map(|it| {
                    args.iter()
                        .position(|a| a.name.as_ref().is_some_and(|n| n.name == *it))
                        .and_then(|i| lowered[i].take())
                        .unwrap_or_else(|| err_expr(span))
                })
                .collect();
            self.held_dtypes_dropped(lowered);
            return mk(
                ExprKind::PersistentId { pickle: p, items },
                Type::PickleObject(p),
                span,
            );
        }
        let Some((p, g)) = self.global(pickle, &text) else {
            self.gap(
                callee[0].span,
                format!("'{text}' is not a declared pickle global"),
                "calls here: declared globals, the persistent kind, global(), key_of(), str()",
            );
            self.held_dtypes_dropped(lowered);
            return err_expr(span);
        };
        let (class, n) = match &self.ir.pickle(p).globals[g].kind {
            GlobalKind::Class => (true, 0),
            GlobalKind::Call { kind, params } => (kind == "class", params.len()),
            _ => (false, 0),
        };
        if class {
            self.error(
                span,
                format!("'{text}' is declared `class`: it cannot be called"),
            );
        } else {
            if args.iter().any(|a| a.name.is_some()) {
                self.error(span, "a global is called with positional arguments");
            }
            if n > 0 && args.len() != n {
                self.error(
                    span,
                    format!("'{text}' takes {n} arguments, found {}", args.len()),
                );
            }
        }
        mk(
            ExprKind::PickleCall {
                pickle: p,
                global: g,
                args: lowered.into_iter().flatten().collect(),
            },
            Type::PickleObject(p),
            span,
        )
    }

    /// `tuple(a, b, ..)`: a pickled tuple of the values, given positionally.
    fn pickle_tuple(
        &mut self,
        sc: &Scope,
        pickle: Option<PickleId>,
        args: &[ast::Arg],
        span: Span,
    ) -> Expr {
        if args.iter().any(|a| a.name.is_some()) {
            self.error(
                span,
                "a tuple's items are given positionally: `tuple(1, shape)`",
            );
        }
        let args = args
            .iter()
            .map(|a| Arg {
                name: None,
                value: self.expr(sc, &a.value),
            })
            .collect();
        let ty = self
            .pickles_in_reach(pickle)
            .next()
            .map_or(Type::Error, Type::PickleObject);
        mk(
            ExprKind::Call {
                func: Builtin::Tuple,
                args,
            },
            ty,
            span,
        )
    }

    /// `build(call, state)`: the object a call of a declared global builds, given `state`
    /// as pickle's `BUILD` gives it.
    fn pickle_build(
        &mut self,
        sc: &Scope,
        pickle: Option<PickleId>,
        args: &[ast::Arg],
        span: Span,
    ) -> Expr {
        let lowered: Vec<Expr> = args.iter().map(|a| self.expr(sc, &a.value)).collect();
        let ok = matches!(
            lowered.as_slice(),
            [
                Expr {
                    kind: ExprKind::PickleCall { .. },
                    ..
                },
                _
            ]
        ) && args.iter().all(|a| a.name.is_none());
        if !ok {
            self.gap(
                span,
                "`build` takes a call of a declared global and its state",
                "`build(numpy.dtype(key_of(descr, dtype), false, true), tuple(3, \"<\", ..))`",
            );
            for x in lowered {
                self.held_dtypes(&x);
            }
            return err_expr(span);
        }
        let args = lowered
            .into_iter()
            .map(|value| Arg { name: None, value })
            .collect();
        let ty = self
            .pickles_in_reach(pickle)
            .next()
            .map_or(Type::Error, Type::PickleObject);
        mk(
            ExprKind::Call {
                func: Builtin::Build,
                args,
            },
            ty,
            span,
        )
    }

    /// `key_of(TABLE, dtype)`: the key of the tensor's dtype in a table of this format.
    fn pickle_key_of(
        &mut self,
        tensor: bool,
        table: &ast::Expr,
        dtype: &ast::Expr,
        span: Span,
    ) -> Expr {
        let found = match table.as_path() {
            Some([n]) => match self.item(self.cur, &n.name) {
                Some(ItemRef::Table(t)) => Some(t),
                _ => None,
            },
            _ => None,
        };
        let ty = found.map_or(Type::Error, |t| self.key_ty(t));
        let table = match found {
            Some(t) => mk(ExprKind::Table(t), Type::Table(t), table.span),
            None => {
                self.gap(
                    table.span,
                    "`key_of` takes a table",
                    "`key_of(TABLE, dtype)` with TABLE a `table` of this format",
                );
                err_expr(table.span)
            }
        };
        let dtype = if tensor && dtype.path_name() == Some("dtype") {
            let v = WriteVar::Dtype;
            mk(ExprKind::WriteVar(v), v.ty(), dtype.span)
        } else {
            self.gap(
                dtype.span,
                "`key_of` takes the tensor's `dtype` as its second argument",
                "`key_of(TABLE, dtype)`, in a tensor mapping's `write` rule",
            );
            err_expr(dtype.span)
        };
        let args = [table, dtype]
            .into_iter()
            .map(|value| Arg { name: None, value })
            .collect();
        mk(
            ExprKind::Call {
                func: Builtin::KeyOf,
                args,
            },
            ty,
            span,
        )
    }
}
