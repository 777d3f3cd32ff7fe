//! The README's opening picture, `docs/figures/hero.svg`: attention from its first mask to a real
//! model, in three chapter thumbnails side by side (chapters 28, 36 and 38), built from their
//! committed copies. `UPDATE_EXPECTED=1 cargo test -p golden --test hero` redraws it after
//! `scripts/figures.sh` (which runs it).

use std::path::PathBuf;

use demo_support::svg::{Stroke, Svg, TextStyle};

/// The chapters of the strip and what each panel shows.
const PANELS: [(&str, &str); 3] = [
    ("ch28-causal-masking", "a mask: no token reads the future"),
    ("ch36-tiny-decoder", "a trained model: two heads in a row copy"),
    ("ch38-a-real-model", "a real model: a head that rests on token 0"),
];

const PANEL_WIDTH: f64 = 300.0;
const PANEL_HEIGHT: f64 = 414.0;
const GAP: f64 = 50.0;
const TOP: f64 = 56.0;

fn figures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("docs").join("figures")
}

fn hero() -> String {
    let width = 3.0 * PANEL_WIDTH + 2.0 * GAP + 40.0;
    let height = TOP + PANEL_HEIGHT + 44.0;
    let mut svg = Svg::new(width, height, "llm-from-scratch: attention, from a mask to a real model");
    for (i, (package, caption)) in PANELS.iter().enumerate() {
        let path = figures().join("thumbnails").join(format!("{package}.svg"));
        let document = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let x = 20.0 + i as f64 * (PANEL_WIDTH + GAP);
        svg.rect(
            x - 1.0,
            TOP - 1.0,
            PANEL_WIDTH + 2.0,
            PANEL_HEIGHT + 2.0,
            "white",
            Some(Stroke::solid("#cccccc", 1.0)),
        );
        svg.place(x, TOP, PANEL_WIDTH, PANEL_HEIGHT, &document);
        svg.text(x + PANEL_WIDTH / 2.0, TOP + PANEL_HEIGHT + 28.0, TextStyle::centered().size(15.0), caption);
        if i + 1 < PANELS.len() {
            let y = TOP + PANEL_HEIGHT / 2.0;
            svg.arrow(x + PANEL_WIDTH + 8.0, y, x + PANEL_WIDTH + GAP - 8.0, y, Stroke::solid("#555555", 2.0));
        }
    }
    svg.finish()
}

#[test]
fn the_readme_hero_matches_its_committed_copy() {
    let drawn = hero();
    demo_support::xml::check_well_formed(&drawn).unwrap();
    let path = figures().join("hero.svg");
    if std::env::var_os("UPDATE_EXPECTED").is_some_and(|v| v == "1") {
        std::fs::write(&path, &drawn).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == drawn,
        "docs/figures/hero.svg differs from the strip of the committed thumbnails: run \
         UPDATE_EXPECTED=1 cargo test -p golden --test hero (scripts/figures.sh does) and commit it\n{}",
        golden::line_diff(&committed, &drawn, 3)
    );
}
