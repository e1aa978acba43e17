//! `include/zpage.h` agrees with the library: the stats struct's fields come
//! from the region library's one figure list, the options struct's from its
//! one option list, and the options struct's layout is the one the library
//! reads (checked by the C compiler).
//!
//! After adding a figure or an option, regenerate the header's blocks with
//! `ZPAGE_UPDATE_HEADER=1 cargo test -p zpage-ffi --test header`.

use std::path::{Path, PathBuf};
use std::process::Command;
use zpage::zpage_options_fields;
use zpage_region::RegionStats;

const BEGIN: &str =
    "    /* BEGIN GENERATED FIELDS: do not edit (see crates/ffi/tests/header.rs) */\n";
const END: &str = "    /* END GENERATED FIELDS */\n";
const OPTIONS_BEGIN: &str =
    "    /* BEGIN GENERATED OPTIONS: do not edit (see crates/ffi/tests/header.rs) */\n";
const OPTIONS_END: &str = "    /* END GENERATED OPTIONS */\n";

fn header_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include/zpage.h")
}

/// A help text as one line of a C comment.
fn comment(help: &str) -> String {
    let help = help.trim().replace("*/", "* /");
    help.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The C declarations of the stats fields, from the figure list.
fn generated_fields() -> String {
    let mut out = String::new();
    for field in RegionStats::FIELDS {
        out.push_str(&format!(
            "    uint64_t {}; /* {} */\n",
            field.name,
            comment(field.help)
        ));
    }
    out
}

/// The C declarations of the options fields, from the option list.
fn generated_options() -> String {
    let mut out = String::new();
    for field in zpage_options_fields() {
        // `const char *codec`, `int pool`.
        let space = if field.c_type.ends_with('*') { "" } else { " " };
        out.push_str(&format!(
            "    {}{space}{}; /* {} */\n",
            field.c_type,
            field.name,
            comment(&field.help)
        ));
    }
    out
}

/// Checks the block between `begin` and `end` of the header, or with
/// `ZPAGE_UPDATE_HEADER` set, rewrites it.
fn check_block(what: &str, begin_marker: &str, end_marker: &str, wanted: &str) {
    let path = header_path();
    let header = std::fs::read_to_string(&path).unwrap();
    let (Some(begin), Some(end)) = (header.find(begin_marker), header.find(end_marker)) else {
        panic!("{} lacks the {what} markers", path.display());
    };
    let current = &header[begin + begin_marker.len()..end];
    if current == wanted {
        return;
    }
    if std::env::var_os("ZPAGE_UPDATE_HEADER").is_some() {
        let updated = format!(
            "{}{}{}",
            &header[..begin + begin_marker.len()],
            wanted,
            &header[end..]
        );
        std::fs::write(&path, updated).unwrap();
        return;
    }
    panic!(
        "include/zpage.h's {what} differ from the list; regenerate with \
         ZPAGE_UPDATE_HEADER=1 cargo test -p zpage-ffi --test header\n--- header\n{current}--- list\n{wanted}"
    );
}

#[test]
fn stats_fields_come_from_the_figure_list() {
    check_block("zpage_stats fields", BEGIN, END, &generated_fields());
}

#[test]
fn options_fields_come_from_the_option_list() {
    check_block(
        "zpage_options fields",
        OPTIONS_BEGIN,
        OPTIONS_END,
        &generated_options(),
    );
}

#[test]
fn the_c_compiler_sees_the_layout_the_library_reads() {
    let dir = std::env::temp_dir().join(format!("zpage-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut source = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include \"zpage.h\"\nint main(void) {\n",
    );
    let mut layout = vec![("struct_size", 0, 4)];
    layout.extend(
        zpage_options_fields()
            .iter()
            .map(|field| (field.name, field.offset, field.size)),
    );
    for (name, _, _) in &layout {
        source.push_str(&format!(
            "    printf(\"{name} %zu %zu\\n\", offsetof(zpage_options, {name}), sizeof(((zpage_options *)0)->{name}));\n"
        ));
    }
    source.push_str("    printf(\"sizeof(zpage_options) %zu\\n\", sizeof(zpage_options));\n");
    source.push_str("    printf(\"sizeof(zpage_stats) %zu\\n\", sizeof(zpage_stats));\n");
    for (i, field) in RegionStats::FIELDS.iter().enumerate() {
        source.push_str(&format!(
            "    if (offsetof(zpage_stats, {}) != {}) printf(\"misplaced {}\\n\");\n",
            field.name,
            8 * (i + 1),
            field.name
        ));
    }
    source.push_str("    return 0;\n}\n");
    let c = dir.join("layout.c");
    std::fs::write(&c, source).unwrap();
    let exe = dir.join("layout");
    let include = header_path().parent().unwrap().to_path_buf();
    let status = Command::new("cc")
        .args(["-std=c99", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&c)
        .arg("-I")
        .arg(&include)
        .status()
        .expect("cc (listed in .ci/apt-packages)");
    assert!(status.success(), "the header does not compile");
    let output = Command::new(&exe).output().unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    let mut expected = String::new();
    for (name, offset, size) in &layout {
        expected.push_str(&format!("{name} {offset} {size}\n"));
    }
    expected.push_str(&format!(
        "sizeof(zpage_options) {}\nsizeof(zpage_stats) {}\n",
        std::mem::size_of::<zpage::ZpageOptions>(),
        std::mem::size_of::<zpage::ZpageStats>()
    ));
    assert_eq!(text, expected);
    std::fs::remove_dir_all(&dir).unwrap();
}
