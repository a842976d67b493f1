//! The safe wrapper against the real library: $FOXHUNT_DQN_LIBRARY (file or directory), else
//! the newest <repo>/build*/libfoxhunt_dqn.so. No library found is a failure, not a skip.
use foxhunt_dqn::cartpole::CartPole;
use foxhunt_dqn::ffi::Status;
use foxhunt_dqn::{Error, Learner, Transition, Transitions};
mod common;
use common::library;

const SMALL: &str = r#"{"obs_dim": 4, "actions": [2, 3], "hidden": [16], "batch_size": 8,
                        "learning_starts": 0, "replay_capacity": 1000, "seed": 7,
                        "num_envs": 2, "train_freq": 1}"#;

#[test]
fn library_negotiates_major_1() {
    let lib = library();
    assert_eq!(lib.version, "0.1.0");
    assert!(lib.manifest().contains("\"entry_symbol\""));
    assert_eq!(lib.status_name(-7), "FHD_ERR_CONFIG_RANGE");
    assert!(lib.has_minor_1());
    assert_eq!((lib.abi_minor, lib.table_size), (1, 160));
    // the crate's status map is the library's, FHD_ERR_DIVERGED included
    for s in Status::ALL {
        assert_eq!(lib.status_name(s.code()), s.name());
    }
    assert_eq!(lib.status_name(-26), "FHD_ERR_DIVERGED");
    assert_eq!(lib.status_name(-27), "FHD_UNKNOWN_STATUS");
}

#[test]
fn config_errors_carry_the_json_path() {
    let lib = library();
    let bad = r#"{"obs_dim": 4, "actions": [2], "hidden": [8, -3]}"#;
    let e = Learner::with_library(lib.clone(), bad).err().unwrap();
    assert_eq!(e.path(), "$.hidden[1]");
    assert_eq!(e.code(), Some(-7));
    assert!(matches!(e, Error::Config { ref name, .. } if name == "FHD_ERR_CONFIG_RANGE"));
    let e = Learner::with_library(lib, "{\"obs_dim\": 4,\n \"actions\": [2],}").err().unwrap();
    match e {
        Error::Config { line, column, ref name, .. } => {
            assert_eq!(name, "FHD_ERR_CONFIG_SYNTAX");
            assert_eq!(line, 2);
            assert!(column > 0);
        }
        other => panic!("{:?}", other),
    }
}

#[test]
fn step_act_metrics_and_shape_checks() {
    let mut l = Learner::with_library(library(), SMALL).unwrap();
    assert_eq!((l.obs_dim(), l.num_envs(), l.branches()), (4, 2, &[2usize, 3][..]));
    let obs = [0.1f32, 0.2, 0.3, 0.4, -0.1, -0.2, -0.3, -0.4];
    let mut a = [0i32; 4];
    l.step(&obs, None, &mut a).unwrap();
    assert!(a[0] < 2 && a[1] < 3 && a[2] < 2 && a[3] < 3);
    let mut updates = 0;
    for t in 0..30 {
        let tr = Transition { rewards: &[1.0, -1.0], terminated: &[t % 7 == 6, false],
                              truncated: &[false, t % 5 == 4], final_obs: None, valid: None };
        let s = l.step(&obs, Some(tr), &mut a).unwrap();
        updates += s.updates_done;
    }
    let m = l.metrics().unwrap();
    assert_eq!(m.get("env_steps").unwrap().as_u64(), Some(60));
    assert_eq!(m.get("updates").unwrap().as_u64(), Some(updates as u64));
    assert!(updates > 0);
    assert_eq!(m.get("episodes").unwrap().as_u64(), Some(4 + 6));
    // greedy act with Q values: the argmax per branch
    let mut q = [0f32; 10];
    let mut g = [0i32; 4];
    l.act(&obs, false, &mut g, Some(&mut q)).unwrap();
    for row in 0..2 {
        let qs = &q[row * 5..row * 5 + 5];
        let b0 = if qs[1] > qs[0] { 1 } else { 0 };
        let b1 = (0..3).max_by(|&i, &j| qs[2 + i].partial_cmp(&qs[2 + j]).unwrap()).unwrap();
        assert_eq!((g[row * 2], g[row * 2 + 1]), (b0, b1 as i32));
    }
    // wrong lengths are refused before the library sees them
    let e = l.step(&obs[..4], None, &mut a).err().unwrap();
    assert_eq!(e, Error::Shape { argument: "obs", expected: 8, got: 4 });
    let bad = Transition { rewards: &[1.0], terminated: &[false, false],
                           truncated: &[false, false], final_obs: None, valid: None };
    let e = l.step(&obs, Some(bad), &mut a).err().unwrap();
    assert!(matches!(e, Error::Shape { argument: "rewards", .. }), "{:?}", e);
    // a library status names the problem; the learner is unchanged
    let nan = [f32::NAN; 8];
    let e = l.step(&nan, None, &mut a).err().unwrap();
    assert_eq!(e.code(), Some(-15));
    assert!(e.message().contains("obs"), "{}", e);
    assert_eq!(l.metrics().unwrap().get("env_steps").unwrap().as_u64(), Some(60));
}

#[test]
fn save_and_load_round_trip() {
    let lib = library();
    let mut a = Learner::with_library(lib.clone(), SMALL).unwrap();
    let obs = [0.5f32; 8];
    let mut acts = [0i32; 4];
    a.step(&obs, None, &mut acts).unwrap();
    for _ in 0..20 {
        let tr = Transition { rewards: &[0.5, 0.25], terminated: &[false, false],
                              truncated: &[false, false], final_obs: None, valid: None };
        a.step(&obs, Some(tr), &mut acts).unwrap();
    }
    let dir = std::env::temp_dir().join(format!("fhd-rust-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.safetensors");
    a.save(&path, false).unwrap();
    let mut b = Learner::with_library(lib, SMALL).unwrap();
    let w = "online.torso.0.weight";
    assert_ne!(a.tensor(w).unwrap(), b.tensor(w).unwrap());
    b.load(&path, false).unwrap();
    assert_eq!(a.tensor(w).unwrap(), b.tensor(w).unwrap());
    let e = b.load(&dir.join("missing.safetensors"), false).err().unwrap();
    assert_eq!(e.code(), Some(-18), "{}", e);
    assert!(b.tensor("no.such.tensor").is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn learns_cartpole_in_rust() {
    // a short run: the return must rise well above a random policy's ~22
    let cfg = r#"{"obs_dim": 4, "actions": [2], "hidden": [64, 64], "n_step": 3, "lr": 1e-3,
                  "batch_size": 64, "replay_capacity": 20000, "learning_starts": 500,
                  "train_freq": 1, "target_update_interval": 250, "epsilon_end": 0.05,
                  "epsilon_decay_steps": 5000, "seed": 1}"#;
    let mut l = Learner::with_library(library(), cfg).unwrap();
    let mut env = CartPole::new(1);
    let mut obs = env.reset();
    let mut a = [0i32];
    l.step(&obs, None, &mut a).unwrap();
    for _ in 0..15_000 {
        let r = env.step(a[0]);
        let end = r.terminated || r.truncated;
        let last = r.obs;
        obs = if end { env.reset() } else { r.obs };
        let tr = Transition { rewards: &[r.reward], terminated: &[r.terminated],
                              truncated: &[r.truncated],
                              final_obs: if end { Some(&last) } else { None }, valid: None };
        l.step(&obs, Some(tr), &mut a).unwrap();
    }
    let mut eval = CartPole::new(99);
    let mut total = 0.0;
    for _ in 0..5 {
        let mut o = eval.reset();
        loop {
            l.act(&o, false, &mut a, None).unwrap();
            let r = eval.step(a[0]);
            total += r.reward;
            o = r.obs;
            if r.terminated || r.truncated { break; }
        }
    }
    assert!(total / 5.0 > 100.0, "greedy mean {}", total / 5.0);
}

#[test]
fn a_diverged_update_is_status_diverged() {
    // MSE of a 1e30 return overflows the loss: the update is not applied
    let cfg = r#"{"obs_dim": 3, "actions": [2, 3], "hidden": [8], "num_envs": 2,
                  "replay_capacity": 16, "batch_size": 4, "loss": "mse", "seed": 5,
                  "learning_starts": 4, "train_freq": 2}"#;
    let mut l = Learner::with_library(library(), cfg).unwrap();
    let o = [0.1f32, 0.2, 0.3, -0.1, -0.2, -0.3];
    for _ in 0..4 {
        l.observe(Transitions { obs: &o, actions: &[0, 1, 1, 2], rewards: &[1e30, -1e30],
                                next_obs: &o, terminated: &[false; 2], truncated: &[false; 2],
                                valid: None }).unwrap();
    }
    let w = l.tensor("online.torso.0.weight").unwrap();
    let e = l.train(5).err().unwrap();
    assert_eq!(e.status(), Some(Status::ErrDiverged), "{}", e);
    assert!(matches!(e, Error::Status { ref name, .. } if name == "FHD_ERR_DIVERGED"));
    assert!(e.message().contains("diverged"), "{}", e);
    assert_eq!(l.tensor("online.torso.0.weight").unwrap(), w);
    let m = l.metrics().unwrap();
    assert_eq!(m.get("diverged_updates").unwrap().as_u64(), Some(1));
    assert_eq!(m.get("updates").unwrap().as_u64(), Some(0));
    // step diverging on schedule still stores its transitions and chooses actions
    let mut a = [-1i32; 4];
    l.step(&o, None, &mut a).unwrap();
    a = [-1; 4];
    let tr = Transition { rewards: &[0.0, 0.0], terminated: &[false; 2], truncated: &[false; 2],
                          final_obs: None, valid: None };
    let e = l.step(&o, Some(tr), &mut a).err().unwrap();
    assert_eq!(e.status(), Some(Status::ErrDiverged), "{}", e);
    assert!(a[0] >= 0 && a[1] >= 0 && a[2] >= 0 && a[3] >= 0, "{:?}", a);
    assert_eq!(l.metrics().unwrap().get("env_steps").unwrap().as_u64(), Some(10));
}
