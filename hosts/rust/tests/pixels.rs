//! ABI minor 1 through the safe wrapper: a uint8 image learner (obs_info, observe_u8, train,
//! act_u8, step_u8), dtype mismatches refused by the library, the valid mask, and a library
//! whose table ends at minor 0 (FHD_API_HAS gating).
mod common;
use common::{library, library_path};
use foxhunt_dqn::ffi::{FHD_API_V1_SIZE_MINOR_0, FHD_ERR_INVALID_ARGUMENT};
use foxhunt_dqn::{Error, Learner, Library, ObsDtype, Status, Transition, Transitions};

// obs (N = 2, S = 2*8*8 = 128) uint8, one branch of 3 actions
const IMAGE: &str = r#"{"obs_shape": [2, 8, 8], "obs_dtype": "uint8", "actions": [3],
                        "conv": [{"out": 4, "kernel": 3, "stride": 1}], "hidden": [16],
                        "batch_size": 8, "learning_starts": 0, "replay_capacity": 1000,
                        "num_envs": 2, "train_freq": 1, "seed": 5}"#;

const FLAT: &str = r#"{"obs_dim": 3, "actions": [2], "hidden": [8], "batch_size": 4,
                       "learning_starts": 0, "replay_capacity": 100, "num_envs": 2,
                       "seed": 9}"#;

/// A deterministic (2, 128) batch of frames for step t.
fn frames(t: usize) -> Vec<u8> {
    (0..256).map(|i| ((i * 7 + t * 13) % 256) as u8).collect()
}

fn counter(l: &mut Learner, key: &str) -> u64 {
    l.metrics().unwrap().get(key).and_then(|v| v.as_u64()).unwrap()
}

#[test]
fn uint8_image_learner_observes_trains_and_acts() {
    let mut l = Learner::with_library(library(), IMAGE).unwrap();
    let info = l.obs_info().unwrap().clone();
    assert_eq!(info.dtype, ObsDtype::U8);
    assert_eq!(info.shape, vec![2, 8, 8]);
    assert_eq!((info.size, info.frame_stack, l.obs_dim()), (128, 1, 128));
    assert!((info.scale - 1.0 / 255.0).abs() < 1e-9, "{}", info.scale);

    for t in 0..12 {
        let (o, n) = (frames(t), frames(t + 1));
        l.observe_u8(Transitions { obs: &o, actions: &[(t % 3) as i32, ((t + 1) % 3) as i32],
                                   rewards: &[1.0, 0.0], next_obs: &n,
                                   terminated: &[t % 5 == 4, false], truncated: &[false; 2],
                                   valid: None }).unwrap();
    }
    assert_eq!(counter(&mut l, "env_steps"), 24);
    assert_eq!(counter(&mut l, "replay_size"), 24);
    let w0 = l.tensor("online.torso.conv0.weight").unwrap();
    assert_eq!(w0.len(), 4 * 2 * 3 * 3); // (out, in, kh, kw)
    // the dense layer after the conv sees 4 channels of 6x6
    assert_eq!(l.tensor("online.torso.0.weight").unwrap().len(), 16 * 4 * 6 * 6);
    let st = l.train(4).unwrap();
    assert_eq!((st.updates_done, st.update_index), (4, 4));
    assert!(st.loss.is_finite() && st.grad_norm > 0.0, "{:?}", st);
    assert_ne!(l.tensor("online.torso.conv0.weight").unwrap(), w0);

    // greedy actions are the argmax of the Q values
    let o = frames(3);
    let mut a = [0i32; 2];
    let mut q = [0f32; 6];
    l.act_u8(&o, false, &mut a, Some(&mut q)).unwrap();
    for row in 0..2 {
        let qs = &q[row * 3..row * 3 + 3];
        let best = (0..3).max_by(|&i, &j| qs[i].partial_cmp(&qs[j]).unwrap()).unwrap();
        assert_eq!(a[row], best as i32, "{:?}", qs);
    }
    // one observation in an act call is M = 1
    let mut a1 = [0i32; 1];
    l.act_u8(&o[..128], false, &mut a1, None).unwrap();
    assert_eq!(a1[0], a[0]);

    // step_u8: first call, then transitions with a final observation; it trains on schedule
    l.step_u8(&frames(20), None, &mut a).unwrap();
    let last = frames(30);
    let mut updates = 0;
    for t in 21..26 {
        let s = l.step_u8(&frames(t), Some(Transition { rewards: &[0.5, -0.5],
                                                        terminated: &[false, t == 23],
                                                        truncated: &[false; 2],
                                                        final_obs: Some(&last), valid: None }),
                          &mut a).unwrap();
        updates += s.updates_done;
        assert!(a.iter().all(|&x| (0..3).contains(&x)), "{:?}", a);
    }
    assert_eq!(counter(&mut l, "env_steps"), 24 + 10);
    assert_eq!(counter(&mut l, "updates"), 4 + updates as u64);
    assert!(updates > 0);

    // byte slices are length-checked against S and N before the library sees them
    let e = l.act_u8(&o[..100], false, &mut a1, None).err().unwrap();
    assert_eq!(e, Error::Shape { argument: "obs", expected: 128, got: 100 });
    let e = l.step_u8(&o[..128], None, &mut a).err().unwrap();
    assert_eq!(e, Error::Shape { argument: "obs", expected: 256, got: 128 });
    let e = l.observe_u8(Transitions { obs: &o, actions: &[0, 0], rewards: &[0.0, 0.0],
                                       next_obs: &o[..255], terminated: &[false; 2],
                                       truncated: &[false; 2], valid: None }).err().unwrap();
    assert_eq!(e, Error::Shape { argument: "next_obs", expected: 256, got: 255 });
    let e = l.step_u8(&o, Some(Transition { rewards: &[0.0, 0.0], terminated: &[false; 2],
                                            truncated: &[false; 2], final_obs: Some(&o[..1]),
                                            valid: None }), &mut a).err().unwrap();
    assert_eq!(e, Error::Shape { argument: "final_obs", expected: 256, got: 1 });
    assert_eq!(counter(&mut l, "env_steps"), 34);
}

#[test]
fn float_observations_to_a_uint8_learner_are_refused_by_the_library() {
    let mut l = Learner::with_library(library(), IMAGE).unwrap();
    let f = vec![0.5f32; 256];
    let mut a = [0i32; 2];
    let e = l.step(&f, None, &mut a).err().unwrap();
    assert_eq!(e.status(), Some(Status::ErrInvalidArgument), "{}", e);
    assert_eq!(e.code(), Some(FHD_ERR_INVALID_ARGUMENT));
    assert!(e.message().contains("obs_u8") && e.message().contains("uint8"), "{}", e);
    let e = l.act(&f, false, &mut a, None).err().unwrap();
    assert_eq!(e.status(), Some(Status::ErrInvalidArgument), "{}", e);
    let e = l.observe(Transitions { obs: &f, actions: &[0, 1], rewards: &[0.0, 0.0],
                                    next_obs: &f, terminated: &[false; 2],
                                    truncated: &[false; 2], valid: None }).err().unwrap();
    assert_eq!(e.status(), Some(Status::ErrInvalidArgument), "{}", e);
    assert!(e.message().contains("observe"), "{}", e);
    assert_eq!(counter(&mut l, "env_steps"), 0);
    // and the other way round: bytes to a float32 learner
    let mut flat = Learner::with_library(library(), FLAT).unwrap();
    assert_eq!(flat.obs_info().unwrap().dtype, ObsDtype::F32);
    let e = flat.act_u8(&[1, 2, 3], false, &mut [0], None).err().unwrap();
    assert_eq!(e.status(), Some(Status::ErrInvalidArgument), "{}", e);
    assert!(e.message().contains("float32"), "{}", e);
}

#[test]
fn valid_mask_skips_an_env() {
    let mut l = Learner::with_library(library(), FLAT).unwrap();
    let (o, n) = ([0.1f32, 0.2, 0.3, -0.1, -0.2, -0.3], [0.2f32, 0.3, 0.4, -0.2, -0.3, -0.4]);
    let t = |valid| Transitions { obs: &o, actions: &[0, 1], rewards: &[1.0, 2.0], next_obs: &n,
                                  terminated: &[false; 2], truncated: &[false; 2], valid };
    l.observe(t(Some(&[true, false]))).unwrap();
    assert_eq!((counter(&mut l, "env_steps"), counter(&mut l, "replay_size")), (1, 1));
    l.observe(t(Some(&[false, false]))).unwrap();
    assert_eq!((counter(&mut l, "env_steps"), counter(&mut l, "replay_size")), (1, 1));
    l.observe(t(None)).unwrap();
    assert_eq!((counter(&mut l, "env_steps"), counter(&mut l, "replay_size")), (3, 3));
    let e = l.observe(t(Some(&[true]))).err().unwrap();
    assert_eq!(e, Error::Shape { argument: "valid", expected: 2, got: 1 });

    // step: an invalid env stores nothing but still gets an action
    let mut a = [-1i32; 2];
    l.step(&o, None, &mut a).unwrap();
    let tr = |valid| Some(Transition { rewards: &[1.0, 1.0], terminated: &[false, true],
                                       truncated: &[false; 2], final_obs: None, valid });
    a = [-1; 2];
    l.step(&n, tr(Some(&[false, true])), &mut a).unwrap();
    assert!(a.iter().all(|&x| x == 0 || x == 1), "{:?}", a);
    assert_eq!(counter(&mut l, "env_steps"), 4);
    assert_eq!(counter(&mut l, "episodes"), 1); // env 1's termination counted
    l.step(&o, tr(Some(&[true, false])), &mut a).unwrap();
    assert_eq!((counter(&mut l, "env_steps"), counter(&mut l, "episodes")), (5, 1));
}

#[test]
fn a_minor_0_table_gates_the_minor_1_calls() {
    let lib = Library::open_with_table_size(Some(&library_path()),
                                            FHD_API_V1_SIZE_MINOR_0 as usize).unwrap();
    assert!(!lib.has_minor_1());
    assert_eq!((lib.abi_minor, lib.table_size), (0, 152));
    // S comes from the config when there is no obs_info
    let mut l = Learner::with_library(lib.clone(), IMAGE).unwrap();
    assert!(l.obs_info().is_none());
    assert_eq!(l.obs_dim(), 128);
    let mut a = [0i32; 2];
    let e = l.step_u8(&frames(0), None, &mut a).err().unwrap();
    assert_eq!(e, Error::Unsupported { feature: "uint8 observations", abi_minor: 0 });
    let e = l.act_u8(&frames(0), false, &mut a, None).err().unwrap();
    assert!(matches!(e, Error::Unsupported { .. }), "{:?}", e);
    // a float32 learner works as with minor 0, but a valid mask is refused, not ignored
    let mut f = Learner::with_library(lib, FLAT).unwrap();
    let o = [0.0f32; 6];
    f.step(&o, None, &mut a).unwrap();
    let tr = Transition { rewards: &[0.0, 0.0], terminated: &[false; 2], truncated: &[false; 2],
                          final_obs: None, valid: Some(&[true, false]) };
    let e = f.step(&o, Some(tr), &mut a).err().unwrap();
    assert_eq!(e, Error::Unsupported { feature: "valid", abi_minor: 0 });
    f.step(&o, Some(Transition { valid: None, ..tr }), &mut a).unwrap();
    assert_eq!(counter(&mut f, "env_steps"), 2);
}
