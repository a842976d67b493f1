//! The `#[repr(C)]` mirror of abi/foxhunt_dqn.h, ABI major 1, minor 0, field by field in
//! header order, and the libc functions that load it (dlopen, dlsym, dlerror, dlclose).
//!
//! The header's static_asserts are restated below: as compile-time assertions on the sizes
//! always, and on the offsets where core::mem::offset_of! exists (rustc >= 1.77, cfg
//! `fhd_offset_of` set by build.rs); tests::layout checks the offsets at run time as well.
//! Shapes as in the header: N envs / observations, B batch, S obs size, D branches,
//! KT = sum of the branches' actions.

use std::os::raw::{c_char, c_int, c_void};

pub const FHD_ABI_MAJOR: u32 = 1;
pub const FHD_ABI_MINOR: u32 = 0;
pub const FHD_ENTRY_SYMBOL: &[u8] = b"fhd_get_api_base\0";
pub const FHD_ERROR_PATH_MAX: usize = 256;
pub const FHD_ERROR_MESSAGE_MAX: usize = 512;
pub const FHD_CKPT_INCLUDE_REPLAY: u32 = 1;

pub const FHD_OK: i32 = 0;
pub const FHD_ERR_BUFFER_TOO_SMALL: i32 = -13;
pub const FHD_ERR_NOT_READY: i32 = -17;
pub const FHD_ERR_NOT_FOUND: i32 = -23;

/// fhd_error: filled by init and get_api.
#[repr(C)]
pub struct FhdError {
    pub struct_size: u32,
    pub code: i32,
    pub line: i32,
    pub column: i32,
    pub path: [c_char; FHD_ERROR_PATH_MAX],
    pub message: [c_char; FHD_ERROR_MESSAGE_MAX],
}

impl FhdError {
    pub fn new() -> FhdError {
        FhdError {
            struct_size: std::mem::size_of::<FhdError>() as u32,
            code: 0,
            line: 0,
            column: 0,
            path: [0; FHD_ERROR_PATH_MAX],
            message: [0; FHD_ERROR_MESSAGE_MAX],
        }
    }
}

impl Default for FhdError {
    fn default() -> Self {
        FhdError::new()
    }
}

/// The opaque learner handle.
#[repr(C)]
pub struct FhdLearner {
    _private: [u8; 0],
}

pub type GetApiFn = unsafe extern "C" fn(abi_major: u32, err: *mut FhdError) -> *const c_void;

/// fhd_api_base: frozen forever.
#[repr(C)]
pub struct FhdApiBase {
    pub struct_size: u32,
    pub abi_major: u32,
    pub version: *const c_char,
    pub get_api: Option<GetApiFn>,
}

pub type GetApiBaseFn = unsafe extern "C" fn() -> *const FhdApiBase;

/// act: actions for N observations.
#[repr(C)]
pub struct FhdActArgs {
    pub struct_size: u32,
    pub num_obs: u32,      // N >= 1
    pub obs: *const f32,   // (N, S)
    pub actions: *mut i32, // out (N, D)
    pub q_values: *mut f32, // optional out (N, KT)
    pub explore: u32,
    pub reserved: u32,
}

/// observe: N one-step transitions, one per env stream.
#[repr(C)]
pub struct FhdTransitions {
    pub struct_size: u32,
    pub num_envs: u32,          // N
    pub obs: *const f32,        // (N, S)
    pub actions: *const i32,    // (N, D)
    pub rewards: *const f32,    // (N)
    pub next_obs: *const f32,   // (N, S)
    pub terminated: *const u8,  // (N)
    pub truncated: *const u8,   // (N)
}

/// Statistics of the last update done by a call.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FhdTrainStats {
    pub struct_size: u32,
    pub updates_done: u32,
    pub update_index: u64,
    pub loss: f32,
    pub td_abs_mean: f32,
    pub q_mean: f32,
    pub grad_norm: f32,
}

/// step: the agent loop for N envs.
#[repr(C)]
pub struct FhdStepArgs {
    pub struct_size: u32,
    pub num_envs: u32,            // N
    pub obs: *const f32,          // (N, S)
    pub rewards: *const f32,      // (N) or NULL on the first call
    pub terminated: *const u8,    // (N) or NULL
    pub truncated: *const u8,     // (N) or NULL
    pub final_obs: *const f32,    // optional (N, S)
    pub actions: *mut i32,        // out (N, D)
    pub stats: *mut FhdTrainStats, // optional out
}

/// train_batch: one update on a host-supplied batch.
#[repr(C)]
pub struct FhdBatch {
    pub struct_size: u32,
    pub batch_size: u32,         // B
    pub obs: *const f32,         // (B, S)
    pub actions: *const i32,     // (B, D)
    pub rewards: *const f32,     // (B)
    pub next_obs: *const f32,    // (B, S)
    pub terminated: *const u8,   // (B)
    pub discounts: *const f32,   // optional (B)
    pub weights: *const f32,     // optional (B)
    pub td_errors: *mut f32,     // optional out (B, D)
    pub targets: *mut f32,       // optional out (B)
}

/// Description of one named state tensor.
#[repr(C)]
pub struct FhdTensorInfo {
    pub struct_size: u32,
    pub rank: u32,
    pub shape: [u64; 4],
    pub count: u64,
    pub name: [c_char; 96],
}

type L = *mut FhdLearner;

/// fhd_api_v1, minor 0: the function table.
#[repr(C)]
pub struct FhdApiV1 {
    pub struct_size: u32,
    pub abi_major: u32,
    pub abi_minor: u32,
    pub reserved: u32,
    pub manifest: Option<unsafe extern "C" fn() -> *const c_char>,
    pub status_name: Option<unsafe extern "C" fn(i32) -> *const c_char>,
    pub status_message: Option<unsafe extern "C" fn(i32) -> *const c_char>,
    pub init: Option<unsafe extern "C" fn(*const c_char, usize, *mut L, *mut FhdError) -> i32>,
    pub destroy: Option<unsafe extern "C" fn(L)>,
    pub last_error: Option<unsafe extern "C" fn(*const FhdLearner) -> *const c_char>,
    pub act: Option<unsafe extern "C" fn(L, *const FhdActArgs) -> i32>,
    pub observe: Option<unsafe extern "C" fn(L, *const FhdTransitions) -> i32>,
    pub train: Option<unsafe extern "C" fn(L, u32, *mut FhdTrainStats) -> i32>,
    pub train_batch: Option<unsafe extern "C" fn(L, *const FhdBatch, *mut FhdTrainStats) -> i32>,
    pub step: Option<unsafe extern "C" fn(L, *const FhdStepArgs) -> i32>,
    pub metrics: Option<unsafe extern "C" fn(L, *mut c_char, usize, *mut usize) -> i32>,
    pub checkpoint_save: Option<unsafe extern "C" fn(L, *const c_char, u32) -> i32>,
    pub checkpoint_load: Option<unsafe extern "C" fn(L, *const c_char, u32) -> i32>,
    pub tensor_info: Option<unsafe extern "C" fn(L, u32, *mut FhdTensorInfo) -> i32>,
    pub tensor_read: Option<unsafe extern "C" fn(L, *const c_char, *mut f32, u64) -> i32>,
    pub tensor_write: Option<unsafe extern "C" fn(L, *const c_char, *const f32, u64) -> i32>,
}

// ---- the header's layout locks, restated ----------------------------------------------------

use std::mem::size_of;

// Sizes: always at compile time (these are the sizes the header's locks imply on LP64).
const _: () = assert!(size_of::<FhdApiV1>() == 152, "fhd_api_v1 minor 0 size");
const _: () = assert!(size_of::<FhdError>() == 784, "fhd_error v1 size");
const _: () = assert!(size_of::<FhdApiBase>() == 24, "fhd_api_base size");
const _: () = assert!(size_of::<FhdActArgs>() == 40, "fhd_act_args size");
const _: () = assert!(size_of::<FhdTransitions>() == 56, "fhd_transitions size");
const _: () = assert!(size_of::<FhdTrainStats>() == 32, "fhd_train_stats size");
const _: () = assert!(size_of::<FhdStepArgs>() == 64, "fhd_step_args size");
const _: () = assert!(size_of::<FhdBatch>() == 80, "fhd_batch size");
const _: () = assert!(size_of::<FhdTensorInfo>() == 144, "fhd_tensor_info size");

// Offsets: the header's static_asserts, at compile time where offset_of! exists.
#[cfg(fhd_offset_of)]
mod offsets {
    use super::*;
    use core::mem::offset_of;
    const _: () = assert!(offset_of!(FhdApiBase, get_api) == 16, "fhd_api_base is frozen");
    const _: () = assert!(offset_of!(FhdApiV1, manifest) == 16, "fhd_api_v1 minor 0 layout");
    const _: () = assert!(offset_of!(FhdApiV1, init) == 40, "fhd_api_v1 minor 0 layout");
    const _: () = assert!(offset_of!(FhdApiV1, tensor_write) == 144, "fhd_api_v1 minor 0 layout");
    const _: () = assert!(offset_of!(FhdStepArgs, stats) == 56, "fhd_step_args v1 layout");
    const _: () = assert!(offset_of!(FhdBatch, targets) == 72, "fhd_batch v1 layout");
}

/// Byte offset just past table member at `offset` of size 8 (FHD_API_HAS).
pub const fn member_end(offset: usize) -> usize {
    offset + size_of::<usize>()
}

// ---- libc's dynamic loader --------------------------------------------------------------------

pub const RTLD_NOW: c_int = 2;
pub const RTLD_LOCAL: c_int = 0;

#[link(name = "dl")]
extern "C" {
    pub fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    pub fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    pub fn dlerror() -> *mut c_char;
    pub fn dlclose(handle: *mut c_void) -> c_int;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::addr_of;

    fn off<T, F>(base: *const T, field: *const F) -> usize {
        field as usize - base as usize
    }

    #[test]
    fn layout() {
        // the same locks at run time, for compilers without offset_of!
        let base = std::mem::MaybeUninit::<FhdApiBase>::uninit();
        let b = base.as_ptr();
        let api = std::mem::MaybeUninit::<FhdApiV1>::uninit();
        let a = api.as_ptr();
        let step = std::mem::MaybeUninit::<FhdStepArgs>::uninit();
        let s = step.as_ptr();
        let batch = std::mem::MaybeUninit::<FhdBatch>::uninit();
        let t = batch.as_ptr();
        unsafe {
            assert_eq!(off(b, addr_of!((*b).get_api)), 16);
            assert_eq!(off(a, addr_of!((*a).manifest)), 16);
            assert_eq!(off(a, addr_of!((*a).init)), 40);
            assert_eq!(off(a, addr_of!((*a).step)), 96);
            assert_eq!(off(a, addr_of!((*a).tensor_write)), 144);
            assert_eq!(off(s, addr_of!((*s).stats)), 56);
            assert_eq!(off(t, addr_of!((*t).targets)), 72);
        }
    }
}
