//! Tests of the training state: save then resume equals an uninterrupted run, bitwise, and every
//! corruption of the file is a typed error.

use super::*;
use crate::model::{LrSchedule, TokenBatch};
use crate::nn::SplitMix64;

fn training() -> TrainingConfig {
    TrainingConfig {
        adamw: AdamWConfig::default(),
        schedule: LrSchedule::warmup_cosine(1e-2, 1e-3, 3, 12).unwrap(),
        clip_norm: Some(1.0),
    }
}

fn fresh() -> Trainer {
    let config = DecoderConfig::new(7, 8, 2, 2).with_kv_heads(1).with_ffn_width(12).with_rope(8, 100.0);
    Trainer::new(Decoder::new(config, &mut SplitMix64::new(5)).unwrap(), training()).unwrap()
}

/// The batch of step `step`: depends on the step only, so a resumed run sees the same data.
fn batch(step: usize) -> TokenBatch {
    let mut rng = SplitMix64::new(100 + step as u64);
    let seqs: Vec<Vec<usize>> = (0..3).map(|_| (0..6).map(|_| rng.below(7) as usize).collect()).collect();
    TokenBatch::next_token(&seqs, 0).unwrap()
}

fn bits(trainer: &Trainer) -> Vec<u64> {
    let params = trainer.model().parameters();
    let values = params.iter().flat_map(|p| p.value().value().unwrap().into_vec());
    let (m, v) = trainer.optimizer().moments();
    values.chain(m.iter().flatten().copied()).chain(v.iter().flatten().copied()).map(f64::to_bits).collect()
}

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("train-state-{name}-{}.safetensors", std::process::id()))
}

#[test]
fn n_steps_save_resume_n_steps_equals_2n_steps_bitwise() {
    let mut straight = fresh();
    let mut first = fresh();
    for step in 0..6 {
        straight.step(&batch(step)).unwrap();
        first.step(&batch(step)).unwrap();
    }
    let path = temp("resume");
    let notes: BTreeMap<String, String> = [("vocabulary".to_string(), "abc\n".to_string())].into();
    save_train_state(&first, &notes, &path).unwrap();
    let state = load_train_state(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!((state.step, &state.notes), (6, &notes));
    let mut resumed = state.into_trainer(training()).unwrap();
    assert_eq!(bits(&resumed), bits(&first));
    let mut losses = (Vec::new(), Vec::new());
    for step in 6..12 {
        losses.0.push(straight.step(&batch(step)).unwrap());
        losses.1.push(resumed.step(&batch(step)).unwrap());
    }
    assert_eq!(losses.0, losses.1);
    assert_eq!(bits(&resumed), bits(&straight));
    assert_eq!(resumed.steps_taken(), 12);
    // other AdamW settings than the saved ones are refused
    save_train_state(&first, &BTreeMap::new(), &path).unwrap();
    let state = load_train_state(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let other = TrainingConfig { adamw: AdamWConfig { weight_decay: 0.0, ..AdamWConfig::default() }, ..training() };
    assert!(matches!(state.into_trainer(other), Err(ModelError::ParameterListChanged { .. })));
}

#[test]
fn a_run_on_the_tiled_kernel_resumes_on_it_bitwise() {
    // the kernels agree to 1e-12, not bit for bit: a resumed run must continue on the one it
    // trained with, which the file names (a file without the name trained on the explicit one)
    use crate::attention::AttentionPath;
    let tiled = |t: Trainer| {
        let model = t.model().with_attention_path(AttentionPath::Tiled).unwrap();
        Trainer::new(model, training()).unwrap()
    };
    let (mut straight, mut first) = (tiled(fresh()), tiled(fresh()));
    for step in 0..3 {
        straight.step(&batch(step)).unwrap();
        first.step(&batch(step)).unwrap();
    }
    let path = temp("tiled");
    save_train_state(&first, &BTreeMap::new(), &path).unwrap();
    let state = load_train_state(&path).unwrap();
    assert_eq!(state.model.config().path, AttentionPath::Tiled);
    let mut resumed = state.into_trainer(training()).unwrap();
    for step in 3..6 {
        assert_eq!(straight.step(&batch(step)).unwrap(), resumed.step(&batch(step)).unwrap());
    }
    assert_eq!(bits(&resumed), bits(&straight));
    // the same file without the kernel's name: read as the explicit kernel's
    let (tensors, mut metadata) = saved_of(&path);
    metadata.remove("attention");
    let views: Vec<(String, TensorView<'_>)> =
        tensors.iter().map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    std::fs::write(&path, safetensors::serialize(views, Some(metadata.into_iter().collect())).unwrap()).unwrap();
    assert_eq!(load_train_state(&path).unwrap().model.config().path, AttentionPath::Explicit);
    std::fs::remove_file(&path).ok();
}

#[test]
fn the_same_state_saved_twice_is_the_same_file() {
    // the metadata passes through a hash map on its way into the file; its entries (ten here)
    // came out in another order from one save to the next
    let mut trainer = fresh();
    trainer.step(&batch(0)).unwrap();
    let notes: BTreeMap<String, String> = [("vocabulary", "abc"), ("history", "0 0 1 1"), ("z", ""), ("a", "")]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
    let files: Vec<Vec<u8>> = (0..4)
        .map(|i| {
            let path = temp(&format!("twice-{i}"));
            save_train_state(&trainer, &notes, &path).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(bits(&load_train_state(&path).unwrap().into_trainer(training()).unwrap()), bits(&trainer));
            std::fs::remove_file(&path).ok();
            bytes
        })
        .collect();
    assert!(files.iter().all(|f| f == &files[0]), "the same state gave different files");
}

/// `(name, dtype, shape, bytes)` of every tensor of a file.
type Stored = Vec<(String, Dtype, Vec<usize>, Vec<u8>)>;

/// The saved file of a trainer after 2 steps, its tensors and metadata, for corrupting.
fn saved() -> (Stored, BTreeMap<String, String>) {
    let mut trainer = fresh();
    for step in 0..2 {
        trainer.step(&batch(step)).unwrap();
    }
    let path = temp(&format!("saved-{:?}", std::thread::current().id()).replace(['(', ')'], ""));
    save_train_state(&trainer, &BTreeMap::new(), &path).unwrap();
    let stored = saved_of(&path);
    std::fs::remove_file(&path).ok();
    stored
}

/// The tensors and metadata of the file at `path`.
fn saved_of(path: &std::path::Path) -> (Stored, BTreeMap<String, String>) {
    let bytes = std::fs::read(path).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
    let tensors = file
        .tensors()
        .into_iter()
        .map(|(n, v)| (n.to_string(), v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    (tensors, header.metadata().iter().flatten().map(|(k, v)| (k.clone(), v.clone())).collect())
}

fn load_modified(name: &str, edit: impl FnOnce(&mut Stored, &mut BTreeMap<String, String>)) -> TrainStateError {
    let (mut tensors, mut metadata) = saved();
    edit(&mut tensors, &mut metadata);
    let views: Vec<(String, TensorView<'_>)> =
        tensors.iter().map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    let path = temp(name);
    std::fs::write(&path, safetensors::serialize(views, Some(metadata.into_iter().collect())).unwrap()).unwrap();
    let err = load_train_state(&path).unwrap_err();
    std::fs::remove_file(&path).ok();
    err
}

#[test]
fn every_corruption_is_a_typed_error() {
    let err = load_train_state("/nonexistent/state.safetensors").unwrap_err();
    assert!(matches!(err, TrainStateError::Io { action: "read", .. }), "{err}");
    // a header length far past the end of the file: refused before allocating it
    let path = temp("header");
    std::fs::write(&path, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, b'{', b'}']).unwrap();
    let err = load_train_state(&path).unwrap_err();
    std::fs::remove_file(&path).ok();
    assert!(matches!(err, TrainStateError::Header { .. }), "{err}");

    let err = load_modified("format", |_, m| {
        m.insert("format".into(), "other".into());
    });
    assert_eq!(err.to_string(), "train state metadata: format = \"other\" is not \"llm-from-scratch/train-state/1\"");
    let err = load_modified("step", |_, m| {
        m.remove("step");
    });
    assert_eq!(err.to_string(), "train state metadata: step is missing");
    let err = load_modified("steps", |_, m| {
        m.insert("adamw.steps".into(), "3".into());
    });
    assert_eq!(err.to_string(), "train state metadata: adamw.steps = 3 differs from step = 2");
    let err = load_modified("powers", |_, m| {
        m.insert("adamw.beta_powers".into(), "12,34".into());
    });
    assert!(matches!(err, TrainStateError::Metadata { ref key, .. } if key == "adamw.beta_powers"), "{err}");
    let err = load_modified("adamw", |_, m| {
        m.insert("adamw".into(), "{\"beta1\": 2}".into());
    });
    assert!(matches!(err, TrainStateError::Metadata { ref key, .. } if key == "adamw"), "{err}");
    let err = load_modified("attention", |_, m| {
        m.insert("attention".into(), "flash".into());
    });
    assert_eq!(err.to_string(), "train state metadata: attention = \"flash\" is neither \"explicit\" nor \"tiled\"");
    let err = load_modified("config", |_, m| {
        m.insert("config".into(), "{".into());
    });
    assert!(matches!(err, TrainStateError::Config(_)), "{err}");
    // a configuration that would allocate far more than the file holds
    let huge = |key: &'static str, value: u64| {
        move |_: &mut Vec<_>, m: &mut BTreeMap<String, String>| {
            let mut config: Value = serde_json::from_str(&m["config"]).unwrap();
            config[key] = json!(value);
            m.insert("config".into(), config.to_string());
        }
    };
    // 2^40 layers: refused by the configuration's own ceiling (MAX_PARAMETERS) before the
    // file's layer count is consulted
    let err = load_modified("layers", huge("num_hidden_layers", 1 << 40));
    assert!(err.to_string().contains("parameter count"), "{err}");
    let err = load_modified("layers", huge("num_hidden_layers", 3));
    assert_eq!(err, TrainStateError::Limit { what: "layers", value: 3, limit: 2 });
    let err = load_modified("positions", huge("max_position_embeddings", 1 << 23));
    assert!(matches!(err, TrainStateError::Limit { what: "max_positions × head_width", .. }), "{err}");
    let err = load_modified("missing", |t, _| t.retain(|(n, ..)| n != "adamw.second.model.norm.weight"));
    assert_eq!(err.to_string(), "train state: tensor adamw.second.model.norm.weight is missing");
    let err = load_modified("dtype", |t, _| {
        let norm = t.iter_mut().find(|(n, ..)| n == "model.norm.weight").unwrap();
        (norm.1, norm.3) = (Dtype::F32, norm.3[..32].to_vec());
    });
    assert_eq!(err.to_string(), "train state: tensor model.norm.weight has dtype F32; a training state is all F64");
    let err = load_modified("shape", |t, _| {
        let norm = t.iter_mut().find(|(n, ..)| n == "adamw.first.model.norm.weight").unwrap();
        norm.2 = vec![2, 4];
    });
    assert_eq!(err.to_string(), "train state: tensor adamw.first.model.norm.weight has shape [2,4] but [8] was needed");
    let err = load_modified("extra", |t, _| t.push(("lm_head.weight".into(), Dtype::F64, vec![1], vec![0; 8])));
    assert_eq!(err.to_string(), "train state: tensor lm_head.weight is not part of this configuration's state");
    let err = load_modified("power", |_, m| {
        m.insert("adamw.beta_powers".into(), format!("{:016x},{:016x}", 2f64.to_bits(), 0.5f64.to_bits()));
    });
    assert!(matches!(err, TrainStateError::Model(ModelError::InvalidSetting { .. })), "{err}");
    // a write into a folder that does not exist
    let err = save_train_state(&fresh(), &BTreeMap::new(), "/nonexistent/dir/state.safetensors").unwrap_err();
    assert!(matches!(err, TrainStateError::Io { action: "write", .. }), "{err}");
}
