//! Tests run the hand-written kernels' bodies without a GPU: within [`emulate`], a kernel's
//! application on a CPU stream compiles its CUDA body or its Metal twin, with the launch's
//! template constants and the arrays' element types, into a host program (`emulator.h`: one
//! thread per GPU thread, real barriers, warp shuffles through a buffer) and runs it on the
//! arrays. The wrappers' own planning, generated lines and launches are what run, so a test
//! checks what a body computes for the shapes a wrapper gives it, on both dialects. Speed still
//! needs a GPU run; what a GPU compiler checks is checked for CUDA launches when the tests have
//! NVRTC (`cubin::check_compiles`), not for Metal. A body that writes through one of its inputs
//! (`custom::store_bytes`) is checked by reading the inputs back after the run
//! ([`inputs_after_last_run`]).

use std::cell::{Cell, RefCell};
use std::collections::hash_map::DefaultHasher;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{Backend, Kernel, Launch, TemplateArg};
use crate::error::{Error, Result};
use crate::{Array, Dtype, Stream};

thread_local! {
    static DIALECT: Cell<Option<Backend>> = const { Cell::new(None) };
    /// Each input's bytes as the last emulated run on this thread left them.
    static INPUTS_AFTER: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Each input's bytes as the last emulated run on this thread left them (in input order).
pub(crate) fn inputs_after_last_run() -> Vec<Vec<u8>> {
    INPUTS_AFTER.with(|inputs| inputs.borrow().clone())
}

/// Runs `f` with kernels emulated in `dialect`: [`super::backend`] reports it for any stream.
pub(crate) fn emulate<R>(dialect: Backend, f: impl FnOnce() -> R) -> R {
    let before = DIALECT.with(|d| d.replace(Some(dialect)));
    let result = f();
    DIALECT.with(|d| d.set(before));
    result
}

/// Runs `check` on every case in both dialects, case `i` with seed `first_seed + i`; panics
/// naming the dialect and the case that failed.
pub(crate) fn check_cases_in_both_dialects<C>(
    cases: &[C],
    first_seed: u64,
    check: impl Fn(&C, u64) -> Result<()>,
) {
    for dialect in [Backend::Cuda, Backend::Metal] {
        for (i, case) in cases.iter().enumerate() {
            emulate(dialect, || check(case, first_seed + i as u64))
                .unwrap_or_else(|e| panic!("{dialect:?}, case {i}: {e}"));
        }
    }
}

/// The dialect being emulated on this thread, if any.
pub(super) fn dialect() -> Option<Backend> {
    DIALECT.with(Cell::get)
}

/// Applies `kernel` in the emulated dialect: its outputs, each filled with NaN bytes first so
/// that an element the body leaves unwritten shows.
pub(super) fn run(
    kernel: &Kernel<'_>,
    inputs: &[&Array],
    launch: &Launch<'_>,
) -> Result<Vec<Array>> {
    let dialect = dialect().expect("run only inside emulate");
    let body = match dialect {
        Backend::Cuda => kernel.cuda,
        Backend::Metal => kernel
            .metal
            .ok_or_else(|| Error::Mlx(format!("{} has no Metal twin", kernel.name)))?,
    };
    if dialect == Backend::Cuda {
        super::cubin::check_compiles(kernel, inputs, launch)?;
    }
    let stream = Stream::cpu()?;
    let program = program(dialect, kernel, body, inputs, launch)?;
    let binary = compiled(&program)?;
    let folder = scratch_folder()?;
    for (i, input) in inputs.iter().enumerate() {
        std::fs::write(folder.join(format!("{i}.bin")), input.to_bytes(&stream)?)
            .map_err(|e| Error::Mlx(format!("emulator: {e}")))?;
    }
    let output = run_in(&binary, &folder, kernel.name, kernel.outputs);
    let after = (0..inputs.len())
        .map(|i| std::fs::read(folder.join(format!("{i}.after.bin"))))
        .collect::<std::io::Result<Vec<_>>>();
    // The scratch folder goes whether the run succeeded or not.
    let _ = std::fs::remove_dir_all(&folder);
    let outputs = output?;
    let after = after.map_err(|e| Error::Mlx(format!("emulator: {e}")))?;
    INPUTS_AFTER.with(|inputs| *inputs.borrow_mut() = after);
    outputs
        .iter()
        .zip(launch.outputs)
        .map(|(bytes, (shape, dtype))| {
            let shape: Vec<i64> = shape.iter().map(|&d| i64::from(d)).collect();
            Array::from_bytes(bytes, &shape, *dtype)
        })
        .collect()
}

/// Runs the compiled `binary` on the inputs in `folder` and reads back the bytes of each of
/// its `outputs`.
fn run_in(
    binary: &std::path::Path,
    folder: &std::path::Path,
    name: &str,
    outputs: &[&str],
) -> Result<Vec<Vec<u8>>> {
    let done = Command::new(binary)
        .arg(folder)
        .output()
        .map_err(|e| Error::Mlx(format!("emulator: running {}: {e}", binary.display())))?;
    if !done.status.success() {
        return Err(Error::Mlx(format!(
            "emulated {name} failed: {}",
            String::from_utf8_lossy(&done.stderr)
        )));
    }
    outputs
        .iter()
        .map(|output| std::fs::read(folder.join(format!("{output}.bin"))))
        .collect::<std::io::Result<_>>()
        .map_err(|e| Error::Mlx(format!("emulator: {e}")))
}

/// The element type's spelling in `emulator.h`.
fn type_name(dtype: Dtype) -> Result<&'static str> {
    Ok(match dtype {
        Dtype::F32 => "float",
        Dtype::F16 => "emu::half_t",
        Dtype::BF16 => "emu::bf16_t",
        Dtype::I32 => "int32_t",
        Dtype::I64 => "int64_t",
        Dtype::U32 => "uint32_t",
        Dtype::U8 => "uint8_t",
        Dtype::Bool => "bool",
        other => return Err(Error::Dtype(format!("emulator: no C++ type for {other:?}"))),
    })
}

/// The host program: the constants, the body as a function of the named arrays (and of the
/// shapes of those whose `{name}_shape` it reads, as MLX passes them), and a main that reads
/// the inputs, launches the grid and writes each output and the inputs as the run left them.
fn program(
    dialect: Backend,
    kernel: &Kernel<'_>,
    body: &str,
    inputs: &[&Array],
    launch: &Launch<'_>,
) -> Result<String> {
    let mut text = String::new();
    let macro_name = match dialect {
        Backend::Cuda => "EMULATE_CUDA",
        Backend::Metal => "EMULATE_METAL",
    };
    let _ = writeln!(text, "#define {macro_name}\n{}", include_str!("emulator.h"));
    for (name, value) in launch.template {
        let _ = match value {
            TemplateArg::Int(v) => writeln!(text, "constexpr int {name} = {v};"),
            TemplateArg::Type(d) => writeln!(text, "using {name} = {};", type_name(*d)?),
        };
    }
    let mut params = Vec::new();
    let mut reads = String::new();
    let mut writes = String::new();
    let mut args = Vec::new();
    for (i, (name, array)) in kernel.inputs.iter().zip(inputs).enumerate() {
        let ty = type_name(array.dtype())?;
        params.push(format!("const {ty}* {name}"));
        let _ = writeln!(
            reads,
            "  auto bytes{i} = emu::read_file((folder + \"/{i}.bin\").c_str());\n  \
             const {ty}* {name} = reinterpret_cast<const {ty}*>(bytes{i}.data());"
        );
        let _ = writeln!(
            writes,
            "  emu::write_file((folder + \"/{i}.after.bin\").c_str(), bytes{i});"
        );
        args.push(name.to_string());
        if super::reads_shape(body, name, array) {
            let dims: Vec<String> = array.shape().iter().map(i64::to_string).collect();
            params.push(format!("const int32_t* {name}_shape"));
            let _ = writeln!(
                reads,
                "  const int32_t {name}_dims[] = {{{}}};",
                dims.join(", ")
            );
            args.push(format!("{name}_dims"));
        }
    }
    let mut made = String::new();
    for (name, (shape, dtype)) in kernel.outputs.iter().zip(launch.outputs) {
        let ty = type_name(*dtype)?;
        let elements: i64 = shape.iter().map(|&d| i64::from(d)).product();
        params.push(format!("{ty}* {name}"));
        args.push(format!("reinterpret_cast<{ty}*>({name}.data())"));
        let _ = writeln!(
            made,
            "  std::vector<unsigned char> {name}({}, 0xff);",
            elements * dtype.size_in_bytes() as i64
        );
        let _ = writeln!(
            writes,
            "  emu::write_file((folder + \"/{name}.bin\").c_str(), {name});"
        );
    }
    let _ = write!(
        text,
        "void kernel_body({params}) {{\n{body}\n}}\n\
         #include <string>\n\
         int main(int, char** argv) {{\n  const std::string folder = argv[1];\n{reads}{made}  \
         emu::launch({blocks}, {threads}, [&] {{ kernel_body({args}); }});\n{writes}}}\n",
        params = params.join(", "),
        blocks = launch.blocks,
        threads = launch.threads,
        args = args.join(", "),
    );
    Ok(text)
}

/// The program's binary, compiled once per distinct source (the header is part of it) into a
/// folder named by its hash under the temporary directory, which later runs reuse: reruns
/// skip the compiler and the folder holds one binary per kernel variant, not one per run.
fn compiled(program: &str) -> Result<PathBuf> {
    let mut hasher = DefaultHasher::new(); // fixed keys: the same name in every process
    program.hash(&mut hasher);
    let folder = std::env::temp_dir()
        .join("mlx-kernel-emulator")
        .join(format!("{:016x}", hasher.finish()));
    let binary = folder.join("kernel");
    if binary.exists() {
        return Ok(binary);
    }
    let io = |e: std::io::Error| Error::Mlx(format!("emulator: {e}"));
    std::fs::create_dir_all(&folder).map_err(io)?;
    // Per-process names, then a rename: test processes compiling one source at once agree.
    let mine = format!("{}-{:?}", std::process::id(), std::thread::current().id());
    let source = folder.join(format!("kernel-{mine}.cpp"));
    let built = folder.join(format!("kernel-{mine}"));
    std::fs::write(&source, program).map_err(io)?;
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
    let done = Command::new(&compiler)
        .args(["-std=c++17", "-O1", "-pthread", "-w", "-o"])
        .arg(&built)
        .arg(&source)
        .output()
        .map_err(|e| Error::Mlx(format!("emulator: running {compiler}: {e}")))?;
    if !done.status.success() {
        return Err(Error::Mlx(format!(
            "emulator: {compiler} failed on {}:\n{}",
            source.display(),
            String::from_utf8_lossy(&done.stderr)
        )));
    }
    let _ = std::fs::remove_file(&source);
    std::fs::rename(&built, &binary).map_err(io)?;
    Ok(binary)
}

fn scratch_folder() -> Result<PathBuf> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let folder = std::env::temp_dir().join(format!(
        "mlx-kernel-emulator-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&folder).map_err(|e| Error::Mlx(format!("emulator: {e}")))?;
    Ok(folder)
}

/// Values in [-2, 2), deterministic.
pub(crate) fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let bits = state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
            (bits as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

/// `data` rounded to `dtype`: the array a kernel reads and the values a reference uses.
pub(crate) fn rounded(
    data: &[f32],
    shape: &[i64],
    dtype: Dtype,
    cpu: &Stream,
) -> (Array, Vec<f32>) {
    let array = crate::ops::astype(&Array::from_slice(data, shape).unwrap(), dtype, cpu).unwrap();
    let back = crate::ops::astype(&array, Dtype::F32, cpu)
        .unwrap()
        .to_vec::<f32>(cpu)
        .unwrap();
    (array, back)
}

/// Holds a kernel's value to its float64 reference, within `tolerance` relative to the
/// reference's size (absolute near zero); `place` names the element when it is not.
#[track_caller]
pub(crate) fn assert_near(found: f64, want: f64, tolerance: f64, place: impl FnOnce() -> String) {
    assert!(
        (found - want).abs() <= tolerance * (1.0 + want.abs()),
        "{}: {found} against {want}",
        place()
    );
}

/// One query row's attention in float64 over keys `range` (zeros when it is empty).
pub(crate) fn attend_row<'a>(
    query: &[f32],
    range: std::ops::Range<i64>,
    key: impl Fn(i64) -> &'a [f32],
    value: impl Fn(i64) -> &'a [f32],
    scale: f32,
) -> Vec<f64> {
    let scores: Vec<f64> = range
        .clone()
        .map(|j| {
            let dot: f64 = query
                .iter()
                .zip(key(j))
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum();
            dot * f64::from(scale)
        })
        .collect();
    let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = scores.iter().map(|x| (x - top).exp()).collect();
    let total: f64 = weights.iter().sum();
    let mut row = vec![0.0; query.len()];
    for (j, w) in range.zip(&weights) {
        for (out, v) in row.iter_mut().zip(value(j)) {
            *out += w * f64::from(*v) / total;
        }
    }
    row
}

/// A paged KV cache for tests: `sequences` sequences of `per_sequence` blocks of `block_rows`
/// rows each, handed out shuffled from a pool with 3 blocks no sequence uses.
pub(crate) struct Pool {
    pub table: Vec<i32>,
    pub keys: Array,
    pub values: Array,
    /// The keys' and values' elements as rounded to the pool's type.
    pub key_elements: Vec<f32>,
    pub value_elements: Vec<f32>,
    per_sequence: i64,
    block_rows: i64,
    kv_heads: i64,
    head: i64,
}

impl Pool {
    #[allow(clippy::too_many_arguments)] // a pool's shape, element type and seed
    pub fn new(
        seed: u64,
        sequences: i64,
        per_sequence: i64,
        block_rows: i64,
        kv_heads: i64,
        head: i64,
        dtype: Dtype,
        cpu: &Stream,
    ) -> Pool {
        let blocks = sequences * per_sequence + 3;
        // Sequence s's i-th block is pool block (7·(s·per_sequence + i) + 2) mod blocks.
        let table = (0..sequences * per_sequence)
            .map(|i| ((7 * i + 2) % blocks) as i32)
            .collect();
        let shape = [blocks, block_rows, kv_heads, head];
        let n = (blocks * block_rows * kv_heads * head) as usize;
        let (key_array, key_elements) = rounded(&values(seed, n), &shape, dtype, cpu);
        let (value_array, value_elements) = rounded(&values(seed + 1, n), &shape, dtype, cpu);
        Pool {
            table,
            keys: key_array,
            values: value_array,
            key_elements,
            value_elements,
            per_sequence,
            block_rows,
            kv_heads,
            head,
        }
    }

    /// The block table, int32 `[sequences, per_sequence]`.
    pub fn table_array(&self) -> Array {
        let rows = self.table.len() as i64 / self.per_sequence;
        Array::from_slice(&self.table, &[rows, self.per_sequence]).unwrap()
    }

    /// Where row `j` of sequence `s`, key head `h` starts in the elements.
    pub fn at(&self, s: i64, h: i64, j: i64) -> usize {
        let block = i64::from(self.table[(s * self.per_sequence + j / self.block_rows) as usize]);
        (((block * self.block_rows + j % self.block_rows) * self.kv_heads + h) * self.head) as usize
    }
}
