//! The import graph of this crate's files: which file uses which, read from
//! the source (every `crate::` path, in `use` lines and in code, `super::`
//! outside inline modules, and paths into a file's own submodules;
//! comments and string literals are skipped, and a name the crate root
//! re-exports counts as the file that defines it).
//!
//! Files may depend on each other in pairs at most: every strongly
//! connected set of files has one or two members, so no import cycle runs
//! through three files or more. `docs/ARCHITECTURE.md` draws the graph in
//! layers; after changing imports, redraw it with
//! `ZPAGE_UPDATE_DOCS=1 cargo test -p zpage-region --test imports`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

const BEGIN: &str = "<!-- BEGIN GENERATED IMPORT GRAPH: crates/region/tests/imports.rs -->\n";
const END: &str = "<!-- END GENERATED IMPORT GRAPH -->\n";

/// A file of the crate: its name (`fault`, `fork/gate`, `lib`) and its
/// module path from the crate root (`[]` for `lib.rs`).
#[derive(Debug)]
struct File {
    name: String,
    module: Vec<String>,
    source: String,
}

/// `src/**/*.rs` of this crate.
fn crate_files() -> Vec<File> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                paths.push(path);
            }
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|path: PathBuf| {
            let relative = path.strip_prefix(&src).unwrap().with_extension("");
            let name = relative.to_str().unwrap().to_string();
            let mut module: Vec<String> = name.split('/').map(String::from).collect();
            if module.last().is_some_and(|m| m == "mod") {
                module.pop();
            }
            if module == ["lib"] {
                module.clear();
            }
            let name = if module.is_empty() {
                "lib".to_string()
            } else {
                module.join("/")
            };
            File {
                name,
                module,
                source: std::fs::read_to_string(&path).unwrap(),
            }
        })
        .collect()
}

/// `source` with comments, string literals and character literals blanked
/// out (line breaks kept).
fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && is_raw_string(&chars, i) {
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            i += 2 + hashes;
            while i < chars.len() {
                if chars[i] == '"' && chars[i + 1..].iter().take(hashes).all(|&h| h == '#') {
                    i += 1 + hashes;
                    break;
                }
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if let Some(&c) = chars.get(i) {
                    blank(&mut out, c);
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' && next == Some('\\') {
            // An escaped character literal: '\n', '\'', '\u{..}'.
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Whether the `r` at `i` starts a raw string (`r"`, `r#"`), not an
/// identifier ending in `r`.
fn is_raw_string(chars: &[char], i: usize) -> bool {
    let starts_token = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
    let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
    starts_token && chars.get(i + 1 + hashes) == Some(&'"')
}

fn tokens(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push("::".into());
            i += 2;
        } else if !c.is_whitespace() {
            out.push(c.to_string());
            i += 1;
        } else {
            i += 1;
        }
    }
    out
}

fn is_ident(token: &str) -> bool {
    token
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Reads the path (or `{...}` group of paths) at `tokens[i..]` under
/// `prefix` into `out`; returns the index after it.
fn read_paths(
    tokens: &[String],
    mut i: usize,
    prefix: Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    let mut path = prefix;
    loop {
        match tokens.get(i).map(String::as_str) {
            Some("{") => {
                i += 1;
                loop {
                    match tokens.get(i).map(String::as_str) {
                        Some("}") => return i + 1,
                        Some(",") => i += 1,
                        None => return i,
                        _ => i = read_paths(tokens, i, path.clone(), out),
                    }
                }
            }
            Some("self") => {
                out.push(path);
                return i + 1;
            }
            Some(t) if is_ident(t) => {
                path.push(t.to_string());
                i += 1;
                if tokens.get(i).map(String::as_str) == Some("::") {
                    i += 1;
                    continue;
                }
                if tokens.get(i).map(String::as_str) == Some("as") {
                    i += 2;
                }
                out.push(path);
                return i;
            }
            _ => {
                // `*`, or a generic argument list after `::`.
                out.push(path);
                return i;
            }
        }
    }
}

/// The module paths `source` (the file of module `module`) refers to;
/// `is_file` tells which module paths are files (a path starting with one
/// of this file's submodules is relative to it).
fn references(
    module: &[String],
    source: &str,
    is_file: &dyn Fn(&[String]) -> bool,
) -> Vec<Vec<String>> {
    let tokens = tokens(&code_only(source));
    let mut out = Vec::new();
    // Brace depths at which inline modules (`mod tests { ... }`) opened:
    // `super::` inside one names this file's own module.
    let mut inline_modules: Vec<usize> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < tokens.len() {
        let token = tokens[i].as_str();
        let followed_by_path = tokens.get(i + 1).map(String::as_str) == Some("::");
        let macro_crate = i > 0 && tokens[i - 1] == "$";
        match token {
            "{" => depth += 1,
            "}" => {
                depth -= 1;
                if inline_modules.last() == Some(&depth) {
                    inline_modules.pop();
                }
            }
            "mod" if tokens.get(i + 2).map(String::as_str) == Some("{") => {
                inline_modules.push(depth);
            }
            "crate" if followed_by_path && !macro_crate => {
                i = read_paths(&tokens, i + 2, Vec::new(), &mut out);
                continue;
            }
            "super" if followed_by_path && inline_modules.is_empty() => {
                let parent = module[..module.len().saturating_sub(1)].to_vec();
                i = read_paths(&tokens, i + 2, parent, &mut out);
                continue;
            }
            _ if followed_by_path
                && is_ident(token)
                && (i == 0 || tokens[i - 1] != "::")
                && is_file(&[module, &[token.to_string()]].concat()) =>
            {
                i = read_paths(&tokens, i, module.to_vec(), &mut out);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The crate's files and, for each, the files it uses.
struct Graph {
    names: Vec<String>,
    uses: Vec<BTreeSet<usize>>,
}

fn graph(files: &[File]) -> Graph {
    let by_module: BTreeMap<&[String], usize> = files
        .iter()
        .enumerate()
        .map(|(n, f)| (f.module.as_slice(), n))
        .collect();
    // Names the crate root re-exports (`pub use fault::Access;`): a path
    // `crate::Access` is a use of the file that defines it.
    let mut reexports: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if let Some(root) = files.iter().find(|f| f.module.is_empty()) {
        let tokens = tokens(&code_only(&root.source));
        for (i, pair) in tokens.windows(2).enumerate() {
            if pair[0] == "pub" && pair[1] == "use" {
                let mut paths = Vec::new();
                read_paths(&tokens, i + 2, Vec::new(), &mut paths);
                for path in paths {
                    if let Some(last) = path.last() {
                        reexports.insert(last.clone(), path.clone());
                    }
                }
            }
        }
    }
    let resolve = |path: &[String]| -> Option<usize> {
        let path: Vec<String> = match path.first() {
            Some(first) if !by_module.contains_key(&path[..1]) => reexports.get(first)?.clone(),
            _ => path.to_vec(),
        };
        (1..=path.len())
            .rev()
            .find_map(|k| by_module.get(&path[..k]).copied())
    };
    let uses = files
        .iter()
        .enumerate()
        .map(|(n, f)| {
            references(&f.module, &f.source, &|m| by_module.contains_key(m))
                .iter()
                .filter_map(|path| resolve(path))
                .filter(|&to| to != n)
                .collect()
        })
        .collect();
    Graph {
        names: files.iter().map(|f| f.name.clone()).collect(),
        uses,
    }
}

/// Strongly connected sets of files (Tarjan), each sorted.
fn strongly_connected(graph: &Graph) -> Vec<Vec<usize>> {
    struct State<'a> {
        graph: &'a Graph,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        sets: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &s.graph.uses[v] {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut set = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                set.push(w);
                if w == v {
                    break;
                }
            }
            set.sort_unstable();
            s.sets.push(set);
        }
    }
    let n = graph.names.len();
    let mut state = State {
        graph,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        sets: Vec::new(),
    };
    for v in 0..n {
        if state.index[v].is_none() {
            visit(&mut state, v);
        }
    }
    state.sets
}

/// The shortest cycle through `from` inside `set`, as file names.
fn shortest_cycle(graph: &Graph, set: &[usize], from: usize) -> Vec<String> {
    let mut came_from: BTreeMap<usize, usize> = BTreeMap::new();
    let mut queue = VecDeque::from([from]);
    while let Some(v) = queue.pop_front() {
        for &w in &graph.uses[v] {
            if !set.contains(&w) {
                continue;
            }
            if w == from {
                let mut back = Vec::new();
                let mut at = v;
                while at != from {
                    back.push(graph.names[at].clone());
                    at = came_from[&at];
                }
                let mut cycle = vec![graph.names[from].clone()];
                cycle.extend(back.into_iter().rev());
                cycle.push(graph.names[from].clone());
                return cycle;
            }
            if let std::collections::btree_map::Entry::Vacant(e) = came_from.entry(w) {
                e.insert(v);
                queue.push_back(w);
            }
        }
    }
    Vec::new()
}

/// Every strongly connected set of more than two files, with a cycle
/// through it.
fn long_cycles(graph: &Graph) -> Vec<String> {
    strongly_connected(graph)
        .into_iter()
        .filter(|set| set.len() > 2)
        .map(|set| {
            let members: Vec<&str> = set.iter().map(|&v| graph.names[v].as_str()).collect();
            format!(
                "{{{}}}, e.g. {}",
                members.join(", "),
                shortest_cycle(graph, &set, set[0]).join(" -> ")
            )
        })
        .collect()
}

/// The graph in layers: a file's layer is one above the highest layer it
/// uses (two files that use each other share one). Each line: a file and
/// the files it uses. `lib.rs` is left out: it declares the modules and
/// re-exports public names, and uses nothing itself.
fn drawing(graph: &Graph) -> String {
    let sets = strongly_connected(graph);
    let mut set_of = vec![0; graph.names.len()];
    for (s, set) in sets.iter().enumerate() {
        for &v in set {
            set_of[v] = s;
        }
    }
    // Tarjan emits a set after every set it uses.
    let mut layer_of_set = vec![0usize; sets.len()];
    for (s, set) in sets.iter().enumerate() {
        layer_of_set[s] = set
            .iter()
            .flat_map(|&v| graph.uses[v].iter())
            .filter(|&&w| set_of[w] != s)
            .map(|&w| layer_of_set[set_of[w]] + 1)
            .max()
            .unwrap_or(0);
    }
    let mut layers: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for v in (0..graph.names.len()).filter(|&v| graph.names[v] != "lib") {
        layers.entry(layer_of_set[set_of[v]]).or_default().push(v);
    }
    let width = graph.names.iter().map(String::len).max().unwrap_or(0);
    let mut out = String::new();
    for (layer, mut files) in layers.into_iter().rev() {
        files.sort_by(|&a, &b| graph.names[a].cmp(&graph.names[b]));
        out.push_str(&format!("layer {layer}\n"));
        for v in files {
            let mut used: Vec<&str> = graph.uses[v]
                .iter()
                .map(|&w| graph.names[w].as_str())
                .collect();
            used.sort_unstable();
            let line = format!("  {:width$} -> {}", graph.names[v], used.join(" "));
            out.push_str(line.trim_end_matches([' ', '-', '>']));
            out.push('\n');
        }
    }
    out
}

fn architecture_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/ARCHITECTURE.md")
}

#[test]
fn no_import_cycle_runs_through_more_than_two_files() {
    let graph = graph(&crate_files());
    let cycles = long_cycles(&graph);
    assert!(
        cycles.is_empty(),
        "files of crates/region that depend on each other through three files or more:\n{}\n\
         the whole graph:\n{}",
        cycles.join("\n"),
        drawing(&graph)
    );
}

#[test]
fn the_architecture_document_draws_the_graph_as_it_is() {
    let drawn = drawing(&graph(&crate_files()));
    let path = architecture_path();
    let document = std::fs::read_to_string(&path).unwrap();
    let (Some(begin), Some(end)) = (document.find(BEGIN), document.find(END)) else {
        panic!("{} lacks the import graph's markers", path.display());
    };
    let wanted = format!("```text\n{drawn}```\n");
    let current = &document[begin + BEGIN.len()..end];
    if current == wanted {
        return;
    }
    if std::env::var_os("ZPAGE_UPDATE_DOCS").is_some() {
        let updated = format!(
            "{}{wanted}{}",
            &document[..begin + BEGIN.len()],
            &document[end..]
        );
        std::fs::write(&path, updated).unwrap();
        return;
    }
    panic!(
        "docs/ARCHITECTURE.md draws another import graph than crates/region's; redraw it with \
         ZPAGE_UPDATE_DOCS=1 cargo test -p zpage-region --test imports\n--- drawn\n{current}--- now\n{wanted}"
    );
}

fn synthetic(files: &[(&str, &str)]) -> Graph {
    let files: Vec<File> = files
        .iter()
        .map(|(name, source)| {
            let module: Vec<String> = if *name == "lib" {
                Vec::new()
            } else {
                name.split('/').map(String::from).collect()
            };
            File {
                name: name.to_string(),
                module,
                source: source.to_string(),
            }
        })
        .collect();
    graph(&files)
}

fn edges(graph: &Graph) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (v, uses) in graph.uses.iter().enumerate() {
        for &w in uses {
            out.push((graph.names[v].clone(), graph.names[w].clone()));
        }
    }
    out
}

#[test]
fn the_reader_sees_every_kind_of_path_and_nothing_in_comments_or_strings() {
    let graph = synthetic(&[
        ("lib", "mod a; mod b; pub use b::Thing;"),
        (
            "a",
            "use crate::{b::{self, Other}, c::X};\n\
             // crate::d::Y in a comment\n\
             /* crate::d::Y in /* a nested */ block */\n\
             const S: &str = \"crate::d::Y\"; const C: char = '\"';\n\
             fn f() { crate::e::call(); let _ = crate::Thing::new(); }\n\
             mod tests { use super::*; }",
        ),
        ("b", "use super::f; pub struct Thing;"),
        ("c", "macro_rules! m { () => { $crate::d::Y } }"),
        ("d", ""),
        ("e", ""),
        ("f/g", "use super::h::Z; use crate::f::inner::W;"),
        ("f", "mod g; mod h; pub use h::Z; fn x() { let h = 1; }"),
        ("f/h", ""),
    ]);
    let mut found = edges(&graph);
    found.sort();
    let want: Vec<(String, String)> = [
        ("a", "b"),
        ("a", "c"),
        ("a", "e"),
        ("b", "f"),
        ("f", "f/h"),
        ("f/g", "f"),
        ("f/g", "f/h"),
        ("lib", "b"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(found, want);
}

#[test]
fn a_cycle_through_three_files_is_caught_and_one_through_two_is_not() {
    let pair = synthetic(&[
        ("a", "use crate::b::X;"),
        ("b", "use crate::a::Y; use crate::c::Z;"),
        ("c", ""),
    ]);
    assert!(long_cycles(&pair).is_empty());
    let three = synthetic(&[
        ("a", "use crate::b::X;"),
        ("b", "use crate::c::Y;"),
        ("c", "fn f() { crate::a::g() }"),
    ]);
    let found = long_cycles(&three);
    assert_eq!(found, vec!["{a, b, c}, e.g. a -> b -> c -> a".to_string()]);
}
