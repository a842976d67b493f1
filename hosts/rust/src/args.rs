//! The safe argument and result types of Learner's calls: observation elements (f32, u8),
//! what obs_info reports, the transitions step and observe take, the stats of an update.

use std::ptr;

use crate::ffi;

/// The training done by one call (all zero when it did no update).
pub type TrainStats = ffi::FhdTrainStats;

/// The element type of a learner's observations (config obs_dtype).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObsDtype {
    /// "float32": the f32 calls (step, act, observe)
    F32,
    /// "uint8": the u8 calls (step_u8, act_u8, observe_u8); ABI minor 1
    U8,
}

/// An observation element the ABI carries: f32 or u8 (sealed).
pub trait ObsElem: Copy + sealed::Sealed {
    const DTYPE: ObsDtype;
}
impl ObsElem for f32 {
    const DTYPE: ObsDtype = ObsDtype::F32;
}
impl ObsElem for u8 {
    const DTYPE: ObsDtype = ObsDtype::U8;
}
mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for u8 {}
}

/// The pointer pair (float, uint8) of one observation argument: exactly one is not NULL.
pub(crate) fn obs_ptrs<T: ObsElem>(p: *const T) -> (*const f32, *const u8) {
    match T::DTYPE {
        ObsDtype::F32 => (p as *const f32, ptr::null()),
        ObsDtype::U8 => (ptr::null(), p as *const u8),
    }
}

/// The learner's observations, as obs_info reports them (fhd_obs_info).
#[derive(Clone, Debug, PartialEq)]
pub struct ObsInfo {
    pub dtype: ObsDtype,
    /// [S] (flat) or [C, H, W] (image, channel first)
    pub shape: Vec<usize>,
    /// S = values per observation
    pub size: usize,
    /// frames stacked along C by the host (1: none)
    pub frame_stack: usize,
    /// the network's input is scale * obs
    pub scale: f32,
}

/// What the envs returned for the previous actions (each of length N). `T` is the
/// observation element: f32 for step, u8 for step_u8.
#[derive(Clone, Copy, Debug)]
pub struct Transition<'a, T = f32> {
    pub rewards: &'a [f32],
    pub terminated: &'a [bool],
    pub truncated: &'a [bool],
    /// optional (N, S): the true last observation of envs whose episode ended (auto-reset)
    pub final_obs: Option<&'a [T]>,
    /// optional (N), ABI minor 1: env i stores a transition only where valid[i] (it still gets
    /// an action); false on the call whose obs[i] is a NEXT_STEP autoreset's reset observation
    pub valid: Option<&'a [bool]>,
}

/// N one-step transitions for observe, one per env stream. `T`: f32 (observe) or u8
/// (observe_u8).
#[derive(Clone, Copy, Debug)]
pub struct Transitions<'a, T = f32> {
    /// (N, S) s_t
    pub obs: &'a [T],
    /// (N, D) a_t
    pub actions: &'a [i32],
    /// (N) r_{t+1}
    pub rewards: &'a [f32],
    /// (N, S) s_{t+1}: the true final observation when an episode ends
    pub next_obs: &'a [T],
    pub terminated: &'a [bool],
    pub truncated: &'a [bool],
    /// optional (N), ABI minor 1: env i is stored only where valid[i]; None: every env
    pub valid: Option<&'a [bool]>,
}
