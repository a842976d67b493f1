//! foxhunt-dqn from Rust: load libfoxhunt_dqn.so with dlopen, negotiate ABI major 1 and drive
//! a learner through a safe wrapper.
//!
//! ```no_run
//! use foxhunt_dqn::{Learner, Transition};
//! let mut learner = Learner::new(r#"{"obs_dim": 4, "actions": [2], "hidden": [64, 64]}"#)?;
//! let mut actions = [0i32; 1];
//! learner.step(&[0.0, 0.1, 0.0, -0.1], None, &mut actions)?;           // first call
//! let t = Transition { rewards: &[1.0], terminated: &[false], truncated: &[false],
//!                      final_obs: None, valid: None };
//! learner.step(&[0.0, 0.2, 0.0, -0.2], Some(t), &mut actions)?;        // every later call
//! # Ok::<(), foxhunt_dqn::Error>(())
//! ```
//!
//! The library is `Library::open(path)`'s file (or directory holding libfoxhunt_dqn.so), else
//! `$FOXHUNT_DQN_LIBRARY` (the same), else `libfoxhunt_dqn.so` on the loader's search path.
//! Shapes: N = num_envs (or observations in an act call), S = values per observation (obs_dim,
//! or C*H*W of obs_shape), D = branches, KT = sum of the branches' actions; every slice is
//! row-major. float32 learners take f32 slices (step, act, observe), uint8 learners (obs_dtype
//! "uint8", ABI minor 1) u8 slices (step_u8, act_u8, observe_u8).
//!
//! Threading: a Learner is Send (one thread at a time, as the ABI's \[learner\] rule says, is
//! what &mut self gives); it is not Sync. Libraries are shared through Arc.

pub mod cartpole;
pub mod ffi;
pub mod json;

mod args;
mod error;
mod learner;
mod library;

pub use args::{ObsDtype, ObsElem, ObsInfo, TrainStats, Transition, Transitions};
pub use error::Error;
pub use ffi::Status;
pub use json::Value;
pub use learner::Learner;
pub use library::{Library, LIBRARY_ENV, LIBRARY_NAME};
