//! The figure trace has the promised 34 lines, and `--figure` writes a well-formed SVG drawn from it.

use ch30_multi_head_attention::{TITLE, learner_evidence, render_diagram_trace, render_svg};

#[test]
fn trace_has_34_lines_in_the_documented_groups() {
    let trace = render_diagram_trace(&learner_evidence().unwrap());
    assert_eq!(trace.len(), 34);
    let count = |prefix: &str| trace.iter().filter(|l| l.starts_with(prefix)).count();
    let groups = [
        ("CONFIG|", 1),
        ("SHAPE|", 8),
        ("PARTITION|", 2),
        ("WEIGHTS|", 6),
        ("HEAD_OUTPUT|", 6),
        ("MERGED|", 3),
        ("OUTPUT_MAP|", 4),
        ("OUTPUT|", 3),
        ("PREFIX_PROOF|", 1),
    ];
    for (prefix, n) in groups {
        assert_eq!(count(prefix), n, "{prefix}");
    }
    assert!(trace.contains(&"WEIGHTS|head=1|query=1|0.213809,*0.786191,masked".to_string()));
    assert_eq!(trace[33], "PREFIX_PROOF|changed_token=2|rows_0_1=bitwise_unchanged|row_2=changed");
}

#[test]
fn svg_marks_masked_keys_the_diagonal_and_frames_heads_differently() {
    let svg = render_svg(&learner_evidence().unwrap());
    assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
    assert_eq!(svg.matches(">masked<").count(), 6, "three masked keys per head");
    assert_eq!(svg.matches(r##"stroke="#e67e22" stroke-width="4.0""##).count(), 6, "three diagonal cells per head");
    assert!(svg.contains(">a token attending to itself</text>"), "the legend names the diagonal");
    assert!(svg.contains("stroke-dasharray"), "head 1 is framed with a dashed line");
    assert!(svg.contains(">0.79</text>") && svg.contains(">0.95</text>"), "two decimals in every cell");
    assert!(svg.contains(">token 2</text>") && !svg.contains(">q0</text>"), "tokens named in words");
    assert!(svg.contains(&format!("<title>{}</title>", demo_support::fmt::escape(TITLE))));
}

#[test]
fn figure_flag_writes_the_file_and_bad_flags_exit_2() {
    let path = std::env::temp_dir().join(format!("ch30-figure-{}.svg", std::process::id()));
    let bin = env!("CARGO_BIN_EXE_ch30-multi-head-attention");
    let status = std::process::Command::new(bin).arg("--figure").arg(&path).output().unwrap();
    assert!(status.status.success());
    let written = std::fs::read_to_string(&path).unwrap();
    assert!(written.starts_with("<svg"));
    std::fs::remove_file(&path).ok();
    let bad = std::process::Command::new(bin).arg("--nope").output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn a_kernel_target_the_processor_cannot_run_exits_2_with_the_reason() {
    let bin = env!("CARGO_BIN_EXE_ch30-multi-head-attention");
    let bad = std::process::Command::new(bin).env("LLM_KERNELS", "avx9").output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(bad.stdout.is_empty(), "no report before the check");
    let message = String::from_utf8_lossy(&bad.stderr);
    assert!(message.contains("unknown kernel target \"avx9\""), "{message}");
    // the portable target runs everywhere and gives the same report
    let portable = std::process::Command::new(bin).env("LLM_KERNELS", "portable").output().unwrap();
    let default = std::process::Command::new(bin).env_remove("LLM_KERNELS").output().unwrap();
    assert!(portable.status.success() && default.status.success());
    assert_eq!(portable.stdout, default.stdout);
}
