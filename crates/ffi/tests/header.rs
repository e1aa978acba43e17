//! `include/zpage.h` agrees with the library: the stats struct's fields come
//! from the region library's one figure list, and the options struct's
//! layout is the one the library reads (checked by the C compiler).
//!
//! After adding a figure, regenerate the header's block with
//! `ZPAGE_UPDATE_HEADER=1 cargo test -p zpage-ffi --test header`.

use std::path::{Path, PathBuf};
use std::process::Command;
use zpage::ZPAGE_OPTIONS_LAYOUT;
use zpage_region::RegionStats;

const BEGIN: &str =
    "    /* BEGIN GENERATED FIELDS: do not edit (see crates/ffi/tests/header.rs) */\n";
const END: &str = "    /* END GENERATED FIELDS */\n";

fn header_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include/zpage.h")
}

/// The C declarations of the stats fields, from the figure list.
fn generated_fields() -> String {
    let mut out = String::new();
    for field in RegionStats::FIELDS {
        let help = field.help.trim().replace("*/", "* /");
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        out.push_str(&format!("    uint64_t {}; /* {help} */\n", field.name));
    }
    out
}

#[test]
fn stats_fields_come_from_the_figure_list() {
    let path = header_path();
    let header = std::fs::read_to_string(&path).unwrap();
    let (Some(begin), Some(end)) = (header.find(BEGIN), header.find(END)) else {
        panic!("{} lacks the generated-fields markers", path.display());
    };
    let current = &header[begin + BEGIN.len()..end];
    let wanted = generated_fields();
    if current != wanted {
        if std::env::var_os("ZPAGE_UPDATE_HEADER").is_some() {
            let updated = format!(
                "{}{}{}",
                &header[..begin + BEGIN.len()],
                wanted,
                &header[end..]
            );
            std::fs::write(&path, updated).unwrap();
            return;
        }
        panic!(
            "include/zpage.h's zpage_stats fields differ from the figure list; regenerate with \
             ZPAGE_UPDATE_HEADER=1 cargo test -p zpage-ffi --test header\n--- header\n{current}--- list\n{wanted}"
        );
    }
}

#[test]
fn the_c_compiler_sees_the_layout_the_library_reads() {
    let dir = std::env::temp_dir().join(format!("zpage-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut source = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include \"zpage.h\"\nint main(void) {\n",
    );
    for (name, _, _) in ZPAGE_OPTIONS_LAYOUT {
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
    for (name, offset, size) in ZPAGE_OPTIONS_LAYOUT {
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
