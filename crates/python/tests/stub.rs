//! The stub `python/zpage/_zpage.pyi` offers every budget option as a
//! keyword of `Budget` and `Region`, as the extension takes them: its
//! keyword blocks come from the one option list
//! (`zpage_region::BUDGET_OPTIONS`), so type checkers and editors know the
//! options the module accepts.
//!
//! After adding an option, regenerate the stub's blocks with
//! `ZPAGE_UPDATE_STUB=1 cargo test -p zpage-python --test stub`.

use std::path::{Path, PathBuf};
use zpage_region::BUDGET_OPTIONS;

const BEGIN: &str =
    "        # BEGIN GENERATED OPTIONS: do not edit (see crates/python/tests/stub.rs)\n";
const END: &str = "        # END GENERATED OPTIONS\n";

fn stub_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python/zpage/_zpage.pyi")
}

/// The keyword parameters, from the option list. `codec` is left out: it
/// stays the positional parameter it always was, written by hand before
/// the block.
fn generated_keywords() -> String {
    let mut out = String::new();
    for option in BUDGET_OPTIONS.iter().filter(|o| o.name != "codec") {
        // What the extension turns into the option's text (config.rs,
        // `option_text`): ints for sizes and counts, bools for switches,
        // paths for files; strings for everything.
        let hint = match option.syntax {
            "SIZE" => "Size",
            "N" => "int",
            "true|false" => "bool",
            "PATH|URL" | "FILE" => "Path",
            _ => "str",
        };
        out.push_str(&format!(
            "        {}: Optional[{hint}] = None,\n",
            option.name
        ));
    }
    out
}

#[test]
fn budget_keywords_come_from_the_option_list() {
    let path = stub_path();
    let stub = std::fs::read_to_string(&path).unwrap();
    let wanted = generated_keywords();
    let mut updated = String::new();
    let mut rest = stub.as_str();
    let mut blocks = 0;
    let mut stale = Vec::new();
    while let Some(begin) = rest.find(BEGIN) {
        let body = begin + BEGIN.len();
        let end = body
            + rest[body..]
                .find(END)
                .unwrap_or_else(|| panic!("{}: a block is not closed", path.display()));
        if rest[body..end] != wanted {
            stale.push(rest[body..end].to_string());
        }
        updated.push_str(&rest[..body]);
        updated.push_str(&wanted);
        rest = &rest[end..];
        blocks += 1;
    }
    updated.push_str(rest);
    // Budget.__init__ and RegionBase.__init__.
    assert_eq!(
        blocks,
        2,
        "{} should have two option blocks",
        path.display()
    );
    if stale.is_empty() {
        return;
    }
    if std::env::var_os("ZPAGE_UPDATE_STUB").is_some() {
        std::fs::write(&path, updated).unwrap();
        return;
    }
    panic!(
        "_zpage.pyi's budget keywords differ from the option list; regenerate with \
         ZPAGE_UPDATE_STUB=1 cargo test -p zpage-python --test stub\n--- stub\n{}--- list\n{wanted}",
        stale[0]
    );
}
