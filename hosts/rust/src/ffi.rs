//! The `#[repr(C)]` mirror of abi/foxhunt_dqn.h, ABI major 1, minor 1, field by field in
//! header order, and the libc functions that load it (dlopen, dlsym, dlerror, dlclose).
//! Minor 1 appends the `*_u8` observation fields and the `valid` masks to the argument structs
//! and `obs_info` to the table; a host fills them only when the table has `obs_info`
//! (`FHD_API_HAS`), and reads no member that lies past the table's `struct_size`.
//!
//! The header's static_asserts are restated below: as compile-time assertions on the sizes
//! always, and on the offsets where core::mem::offset_of! exists (rustc >= 1.77, cfg
//! `fhd_offset_of` set by build.rs); tests::layout checks the offsets at run time as well.
//! Shapes as in the header: N envs / observations, B batch, S obs size, D branches,
//! KT = sum of the branches' actions.

use std::os::raw::{c_char, c_int, c_void};

pub const FHD_ABI_MAJOR: u32 = 1;
pub const FHD_ABI_MINOR: u32 = 1;
pub const FHD_ENTRY_SYMBOL: &[u8] = b"fhd_get_api_base\0";
pub const FHD_ERROR_PATH_MAX: usize = 256;
pub const FHD_ERROR_MESSAGE_MAX: usize = 512;
pub const FHD_CKPT_INCLUDE_REPLAY: u32 = 1;

pub const FHD_OBS_DTYPE_FLOAT32: u32 = 0;
pub const FHD_OBS_DTYPE_UINT8: u32 = 1;

// Sizes of the minor-0 argument structs and table (the header's *_SIZE_V1_0).
pub const FHD_ACT_ARGS_SIZE_V1_0: u32 = 40;
pub const FHD_TRANSITIONS_SIZE_V1_0: u32 = 56;
pub const FHD_STEP_ARGS_SIZE_V1_0: u32 = 64;
pub const FHD_BATCH_SIZE_V1_0: u32 = 80;
pub const FHD_API_V1_SIZE_MINOR_0: u32 = 152;

/// FHD_STATUS_MAP restated: (constant, Status variant, value, message), in the header's order.
macro_rules! status_map {
    ($(($konst:ident, $variant:ident, $value:expr, $msg:expr)),* $(,)?) => {
        $(pub const $konst: i32 = $value;)*

        /// A status code of the library (fhd_status).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum Status {
            $($variant = $value,)*
        }

        impl Status {
            /// Every status, in the header's order.
            pub const ALL: &'static [Status] = &[$(Status::$variant,)*];
            /// The status of `code`, None for a code the header does not define.
            pub fn from_code(code: i32) -> Option<Status> {
                match code {
                    $($value => Some(Status::$variant),)*
                    _ => None,
                }
            }
            pub fn code(self) -> i32 {
                self as i32
            }
            /// The header's name: "FHD_ERR_DIVERGED".
            pub fn name(self) -> &'static str {
                match self {
                    $(Status::$variant => stringify!($konst),)*
                }
            }
            /// The header's generic message (status_message).
            pub fn message(self) -> &'static str {
                match self {
                    $(Status::$variant => $msg,)*
                }
            }
        }
    };
}

status_map! {
    (FHD_OK, Ok, 0, "success"),
    (FHD_ERR_INVALID_ARGUMENT, ErrInvalidArgument, -1, "invalid argument"),
    (FHD_ERR_NULL_POINTER, ErrNullPointer, -2, "a required pointer argument is NULL"),
    (FHD_ERR_STRUCT_SIZE, ErrStructSize, -3,
     "struct_size is smaller than any version of the struct"),
    (FHD_ERR_CONFIG_SYNTAX, ErrConfigSyntax, -4, "the config is not well-formed JSON"),
    (FHD_ERR_CONFIG_UNKNOWN_KEY, ErrConfigUnknownKey, -5, "the config contains an unknown key"),
    (FHD_ERR_CONFIG_TYPE, ErrConfigType, -6, "a config value has the wrong type"),
    (FHD_ERR_CONFIG_RANGE, ErrConfigRange, -7, "a config value is out of its allowed range"),
    (FHD_ERR_CONFIG_INCONSISTENT, ErrConfigInconsistent, -8,
     "config values are inconsistent with each other"),
    (FHD_ERR_CONFIG_MISSING, ErrConfigMissing, -9, "a required config key is missing"),
    (FHD_ERR_BACKEND_UNAVAILABLE, ErrBackendUnavailable, -10,
     "the requested backend is not available on this machine"),
    (FHD_ERR_OUT_OF_MEMORY, ErrOutOfMemory, -11, "out of memory"),
    (FHD_ERR_NOT_IMPLEMENTED, ErrNotImplemented, -12, "not implemented"),
    (FHD_ERR_BUFFER_TOO_SMALL, ErrBufferTooSmall, -13, "the caller's buffer is too small"),
    (FHD_ERR_SIZE_MISMATCH, ErrSizeMismatch, -14,
     "an array size does not match the learner's configuration"),
    (FHD_ERR_NONFINITE, ErrNonfinite, -15, "an input contains NaN or Inf"),
    (FHD_ERR_ACTION_RANGE, ErrActionRange, -16, "an action index is out of range"),
    (FHD_ERR_NOT_READY, ErrNotReady, -17, "not enough data in the replay buffer to train"),
    (FHD_ERR_IO, ErrIo, -18, "file input/output failed"),
    (FHD_ERR_CHECKPOINT_CORRUPT, ErrCheckpointCorrupt, -19,
     "the checkpoint is corrupt or not a checkpoint"),
    (FHD_ERR_CHECKPOINT_MISMATCH, ErrCheckpointMismatch, -20,
     "the checkpoint does not match the learner's config"),
    (FHD_ERR_CHECKPOINT_VERSION, ErrCheckpointVersion, -21,
     "the checkpoint format version is not supported"),
    (FHD_ERR_UNSUPPORTED_VERSION, ErrUnsupportedVersion, -22,
     "the requested ABI version is not supported"),
    (FHD_ERR_NOT_FOUND, ErrNotFound, -23, "no such item"),
    (FHD_ERR_DEVICE, ErrDevice, -24, "a device (CUDA) call failed"),
    (FHD_ERR_INTERNAL, ErrInternal, -25, "internal error"),
    (FHD_ERR_DIVERGED, ErrDiverged, -26,
     "training diverged: an update or the state would be NaN or Inf"),
}

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
    // minor 1
    pub obs_u8: *const u8, // (N, S) uint8 observations (then obs is NULL)
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
    // minor 1
    pub obs_u8: *const u8,      // (N, S) uint8 s_t (then obs is NULL)
    pub next_obs_u8: *const u8, // (N, S) uint8 s_{t+1} (then next_obs is NULL)
    pub valid: *const u8,       // optional (N) 0/1: env i takes part only where 1; NULL: all
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
    // appended after minor 1 (the training guard's skips); an older library leaves it 0
    pub updates_skipped: u32,
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
    // minor 1
    pub obs_u8: *const u8,        // (N, S) uint8 observations (then obs is NULL)
    pub final_obs_u8: *const u8,  // optional (N, S) uint8 (then final_obs is NULL)
    pub valid: *const u8,         // optional (N) 0/1; NULL: every env is valid
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
    // minor 1
    pub obs_u8: *const u8,       // (B, S) uint8 (then obs is NULL)
    pub next_obs_u8: *const u8,  // (B, S) uint8 (then next_obs is NULL)
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

/// The learner's observations (obs_info, minor 1).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FhdObsInfo {
    pub struct_size: u32,
    pub dtype: u32,       // FHD_OBS_DTYPE_FLOAT32 or _UINT8
    pub rank: u32,        // 1 (flat) or 3 (C, H, W)
    pub shape: [u32; 3],
    pub size: u32,        // S
    pub frame_stack: u32, // frames stacked along C by the host (1: none)
    pub scale: f32,       // the network's input is scale * obs
    pub reserved: u32,
}

type L = *mut FhdLearner;

/// fhd_api_v1, minor 1: the function table. Members past the library's struct_size are
/// absent: Library copies only the bytes inside it and leaves the rest None.
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
    // minor 1
    pub obs_info: Option<unsafe extern "C" fn(L, *mut FhdObsInfo) -> i32>,
}

// ---- the header's layout locks, restated ----------------------------------------------------

use std::mem::size_of;

// Sizes: always at compile time (these are the sizes the header's locks imply on LP64).
const _: () = assert!(size_of::<FhdApiV1>() == 160, "fhd_api_v1 minor 1 size");
const _: () = assert!(size_of::<FhdError>() == 784, "fhd_error v1 size");
const _: () = assert!(size_of::<FhdApiBase>() == 24, "fhd_api_base size");
const _: () = assert!(size_of::<FhdActArgs>() == 48, "fhd_act_args minor 1 size");
const _: () = assert!(size_of::<FhdTransitions>() == 80, "fhd_transitions minor 1 size");
const _: () = assert!(size_of::<FhdTrainStats>() == 40, "fhd_train_stats size");
const _: () = assert!(size_of::<FhdStepArgs>() == 88, "fhd_step_args minor 1 size");
const _: () = assert!(size_of::<FhdBatch>() == 96, "fhd_batch minor 1 size");
const _: () = assert!(size_of::<FhdTensorInfo>() == 144, "fhd_tensor_info size");
const _: () = assert!(size_of::<FhdObsInfo>() == 40, "fhd_obs_info minor 1 size");

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
    const _: () = assert!(offset_of!(FhdActArgs, reserved) == 36, "fhd_act_args v1 layout");
    const _: () = assert!(offset_of!(FhdTransitions, truncated) == 48, "fhd_transitions v1 layout");
    // minor 1
    const _: () = assert!(offset_of!(FhdApiV1, obs_info) == 152, "fhd_api_v1 minor 1 layout");
    const _: () = assert!(offset_of!(FhdActArgs, obs_u8) == 40, "fhd_act_args minor 1 layout");
    const _: () = assert!(offset_of!(FhdTransitions, obs_u8) == 56,
                          "fhd_transitions minor 1 layout");
    const _: () = assert!(offset_of!(FhdTransitions, valid) == 72,
                          "fhd_transitions minor 1 layout");
    const _: () = assert!(offset_of!(FhdStepArgs, obs_u8) == 64, "fhd_step_args minor 1 layout");
    const _: () = assert!(offset_of!(FhdStepArgs, valid) == 80, "fhd_step_args minor 1 layout");
    const _: () = assert!(offset_of!(FhdBatch, obs_u8) == 80, "fhd_batch minor 1 layout");
    // appended after minor 1
    const _: () = assert!(offset_of!(FhdTrainStats, updates_skipped) == 32,
                          "fhd_train_stats updates_skipped layout");
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
        let act = std::mem::MaybeUninit::<FhdActArgs>::uninit();
        let c = act.as_ptr();
        let tr = std::mem::MaybeUninit::<FhdTransitions>::uninit();
        let o = tr.as_ptr();
        unsafe {
            assert_eq!(off(b, addr_of!((*b).get_api)), 16);
            assert_eq!(off(a, addr_of!((*a).manifest)), 16);
            assert_eq!(off(a, addr_of!((*a).init)), 40);
            assert_eq!(off(a, addr_of!((*a).step)), 96);
            assert_eq!(off(a, addr_of!((*a).tensor_write)), 144);
            assert_eq!(off(s, addr_of!((*s).stats)), 56);
            assert_eq!(off(t, addr_of!((*t).targets)), 72);
            assert_eq!(off(c, addr_of!((*c).reserved)), 36);
            assert_eq!(off(o, addr_of!((*o).truncated)), 48);
            // minor 1
            assert_eq!(off(a, addr_of!((*a).obs_info)), 152);
            assert_eq!(off(c, addr_of!((*c).obs_u8)), 40);
            assert_eq!(off(o, addr_of!((*o).obs_u8)), 56);
            assert_eq!(off(o, addr_of!((*o).valid)), 72);
            assert_eq!(off(s, addr_of!((*s).obs_u8)), 64);
            assert_eq!(off(s, addr_of!((*s).valid)), 80);
            assert_eq!(off(t, addr_of!((*t).obs_u8)), 80);
        }
        // the minor-0 sizes are where the first minor-1 field begins
        assert_eq!(off(c, unsafe { addr_of!((*c).obs_u8) }), FHD_ACT_ARGS_SIZE_V1_0 as usize);
        assert_eq!(off(o, unsafe { addr_of!((*o).obs_u8) }), FHD_TRANSITIONS_SIZE_V1_0 as usize);
        assert_eq!(off(s, unsafe { addr_of!((*s).obs_u8) }), FHD_STEP_ARGS_SIZE_V1_0 as usize);
        assert_eq!(off(t, unsafe { addr_of!((*t).obs_u8) }), FHD_BATCH_SIZE_V1_0 as usize);
        assert_eq!(off(a, unsafe { addr_of!((*a).obs_info) }), FHD_API_V1_SIZE_MINOR_0 as usize);
    }

    #[test]
    fn status_map() {
        assert_eq!(Status::ALL.len(), 27);
        for (i, s) in Status::ALL.iter().enumerate() {
            assert_eq!(s.code(), -(i as i32));
            assert_eq!(Status::from_code(s.code()), Some(*s));
        }
        assert_eq!(Status::from_code(FHD_ERR_DIVERGED), Some(Status::ErrDiverged));
        assert_eq!(Status::ErrDiverged.name(), "FHD_ERR_DIVERGED");
        assert_eq!(Status::Ok.name(), "FHD_OK");
        assert_eq!(Status::from_code(-27), None);
    }
}
