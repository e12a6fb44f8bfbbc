//! safetensors files (`ampx::save_safetensors`, `ampx::SafetensorsFile`):
//! a round trip of every dtype bit for bit, the file's layout read back
//! byte by byte against the format's definition, files written and read by
//! the format's reference library (Python's `safetensors`, when python3 has
//! it), and bad input refused with nothing changed.
use std::path::PathBuf;
use std::process::Command;

use ampx::{save_named_safetensors, save_safetensors, Context, DType, SafetensorsFile, Status, Tensor};

/// A folder of its own under the system's temporary folder, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("ampx-rust-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Random bytes (NaN payloads, subnormals and infinities included) from a
/// 64-bit linear congruential generator.
fn random_bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 56) as u8
        })
        .collect()
}

fn numel(shape: &[i64]) -> usize {
    shape.iter().product::<i64>() as usize
}

/// (name, dtype, shape) of a state dict with every dtype, a scalar and an
/// empty tensor.
fn layout() -> Vec<(&'static str, DType, Vec<i64>)> {
    vec![
        ("layer0.weight", DType::F32, vec![2, 3]),
        ("layer0.bias", DType::F16, vec![7]),
        ("layer1.scale", DType::BF16, vec![]),
        ("layer1.index", DType::I32, vec![0, 4]),
        ("embed.ids", DType::I64, vec![1, 2, 2]),
        ("embed.weight", DType::BF16, vec![3, 2]),
    ]
}

fn state(ctx: &Context) -> Vec<(&'static str, Tensor)> {
    layout()
        .into_iter()
        .enumerate()
        .map(|(i, (name, dtype, shape))| {
            let bytes = random_bytes(i as u64 + 1, numel(&shape) * dtype.size());
            (name, Tensor::from_bytes(ctx, dtype, &shape, &bytes).unwrap())
        })
        .collect()
}

fn pairs<'a>(state: &'a [(&'static str, Tensor)]) -> Vec<(&'a str, &'a Tensor)> {
    state.iter().map(|(n, t)| (*n, t)).collect()
}

#[test]
fn a_round_trip_keeps_every_bit_and_the_files_layout_is_the_formats() {
    let ctx = Context::new().unwrap();
    let dir = TempDir::new("safetensors-round-trip");
    let path = dir.path("state.safetensors");
    let state = state(&ctx);
    let metadata = [("format", "pt"), ("step", "1200")];
    save_safetensors(&path, &pairs(&state), &metadata).unwrap();

    // The file as the format defines it: an 8-byte little-endian header
    // length N, N bytes of JSON (padded with spaces to a multiple of 8 by
    // the reference writer, as ampx does), then the data, tiled.
    let bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    assert_eq!(n % 8, 0, "header length {n}");
    let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
    assert!(header.starts_with('{') && header.trim_end().ends_with('}'), "{header}");
    assert!(header.contains("\"__metadata__\"") && header.contains("\"step\":\"1200\""), "{header}");

    let file = SafetensorsFile::open(&ctx, &path).unwrap();
    assert_eq!(file.len().unwrap(), state.len());
    assert!(!file.is_empty().unwrap());
    assert_eq!(file.metadata().unwrap(), vec![("format".into(), "pt".into()), ("step".into(), "1200".into())]);
    // Data ordered by decreasing element size, then by name.
    let mut expected: Vec<(&str, DType, Vec<i64>)> = layout();
    expected.sort_by(|a, b| b.1.size().cmp(&a.1.size()).then(a.0.cmp(b.0)));
    let entries = file.entries().unwrap();
    let mut offset = 8 + n as u64;
    for (i, (entry, (name, dtype, shape))) in entries.iter().zip(&expected).enumerate() {
        assert_eq!(entry.name, *name);
        assert_eq!(entry.dtype, Some(*dtype));
        assert_eq!(entry.dtype_name, dtype.name().to_uppercase());
        assert_eq!(&entry.shape, shape);
        assert_eq!(entry.nbytes as usize, numel(shape) * dtype.size());
        assert_eq!(entry.offset, offset, "{name}: tiles the data area");
        assert_eq!(file.find(name).unwrap(), i);
        let tensor = &state.iter().find(|(n, _)| n == name).unwrap().1;
        let range = entry.offset as usize..(entry.offset + entry.nbytes) as usize;
        assert_eq!(&bytes[range], &tensor.to_bytes().unwrap()[..], "{name}: the file holds its bytes");
        offset += entry.nbytes;
    }
    assert_eq!(offset as usize, bytes.len(), "nothing after the last tensor");

    for (name, tensor) in &state {
        for copy in [false, true] {
            let loaded = file.load(name, copy).unwrap();
            assert_eq!(loaded.dtype().unwrap(), tensor.dtype().unwrap());
            assert_eq!(loaded.shape().unwrap(), tensor.shape().unwrap());
            assert_eq!(loaded.name().unwrap(), *name);
            assert_eq!(loaded.to_bytes().unwrap(), tensor.to_bytes().unwrap(), "{name} copy={copy}");
        }
    }

    // Into existing tensors, by pairs and by the tensors' own names.
    let targets: Vec<(&str, Tensor)> =
        layout().into_iter().map(|(name, dtype, shape)| (name, Tensor::zeros(&ctx, dtype, &shape).unwrap())).collect();
    file.load_into(&pairs(&targets), false).unwrap();
    for ((_, a), (_, b)) in targets.iter().zip(&state) {
        assert_eq!(a.to_bytes().unwrap(), b.to_bytes().unwrap());
    }
    let named: Vec<Tensor> = layout()
        .into_iter()
        .map(|(name, dtype, shape)| {
            let t = Tensor::zeros(&ctx, dtype, &shape).unwrap();
            t.set_name(name).unwrap();
            t
        })
        .collect();
    file.load_into_named(&named.iter().collect::<Vec<_>>(), false).unwrap();
    for (a, (_, b)) in named.iter().zip(&state) {
        assert_eq!(a.to_bytes().unwrap(), b.to_bytes().unwrap());
    }

    // A tensor on the mapping outlives the file handle.
    let mapped = file.load("layer0.weight", false).unwrap();
    drop(file);
    assert_eq!(mapped.to_bytes().unwrap(), state[0].1.to_bytes().unwrap());

    // save_named_safetensors names each tensor by its own name.
    let again = dir.path("named.safetensors");
    save_named_safetensors(&again, &named.iter().collect::<Vec<_>>(), &[]).unwrap();
    let file = SafetensorsFile::open(&ctx, &again).unwrap();
    assert!(file.metadata().unwrap().is_empty());
    let mut names: Vec<String> = file.entries().unwrap().into_iter().map(|e| e.name).collect();
    names.sort();
    let mut want: Vec<String> = layout().into_iter().map(|(n, _, _)| n.to_string()).collect();
    want.sort();
    assert_eq!(names, want);
}

#[test]
fn loads_check_every_pair_before_writing_any() {
    let ctx = Context::new().unwrap();
    let dir = TempDir::new("safetensors-checks");
    let path = dir.path("w.safetensors");
    let w = Tensor::from_slice(&ctx, &[2, 2], &[1.5f32, -2.0, 0.25, 8.0]).unwrap();
    let b = Tensor::from_slice(&ctx, &[2], &[3.0f32, 4.0]).unwrap();
    save_safetensors(&path, &[("w", &w), ("b", &b)], &[]).unwrap();
    let file = SafetensorsFile::open(&ctx, &path).unwrap();

    let first = Tensor::zeros(&ctx, DType::F32, &[2, 2]).unwrap();
    let wrong_shape = Tensor::zeros(&ctx, DType::F32, &[3]).unwrap();
    let e = file.load_into(&[("w", &first), ("b", &wrong_shape)], false).unwrap_err();
    assert_eq!(e.status(), Status::Shape);
    assert_eq!(first.to_vec::<f32>().unwrap(), vec![0.0; 4], "nothing written");

    let half = Tensor::zeros(&ctx, DType::F16, &[2, 2]).unwrap();
    let e = file.load_into(&[("w", &first), ("w", &half)], false).unwrap_err();
    assert_eq!(e.status(), Status::Dtype);
    assert_eq!(first.to_vec::<f32>().unwrap(), vec![0.0; 4], "nothing written");
    // With convert, as a cast does (these values are exact in f16).
    file.load_into(&[("w", &half)], true).unwrap();
    assert_eq!(half.cast(DType::F32).unwrap().to_vec::<f32>().unwrap(), vec![1.5, -2.0, 0.25, 8.0]);

    let e = file.load_into(&[("missing", &first)], false).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("missing"), "{e}");
    assert_eq!(file.load("missing", false).unwrap_err().status(), Status::InvalidArgument);
    let e = file.find("missing").unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("missing"), "{e}");
    assert_eq!(file.entry(2).unwrap_err().status(), Status::InvalidArgument);
    // Unnamed tensors cannot be loaded by their own names.
    assert_eq!(file.load_into_named(&[&first], false).unwrap_err().status(), Status::InvalidArgument);
    // NUL bytes are refused by the binding before the library sees them.
    assert_eq!(file.load("w\0", false).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(file.find("w\0").unwrap_err().status(), Status::InvalidArgument);
}

#[test]
fn bad_files_and_bad_saves_are_refused() {
    let ctx = Context::new().unwrap();
    let dir = TempDir::new("safetensors-bad");
    let t = Tensor::from_slice(&ctx, &[3], &[1.0f32, 2.0, 3.0]).unwrap();
    let good = dir.path("good.safetensors");
    save_safetensors(&good, &[("t", &t)], &[("k", "v")]).unwrap();
    let bytes = std::fs::read(&good).unwrap();

    let e = SafetensorsFile::open(&ctx, dir.path("absent.safetensors")).unwrap_err();
    assert_eq!(e.status(), Status::Io);
    let truncated = dir.path("truncated.safetensors");
    std::fs::write(&truncated, &bytes[..bytes.len() - 3]).unwrap();
    let e = SafetensorsFile::open(&ctx, &truncated).unwrap_err();
    assert_eq!(e.status(), Status::Corrupt);
    assert!(e.message().contains("truncated.safetensors"), "{e}");
    let huge = dir.path("huge.safetensors");
    let mut forged = bytes.clone();
    forged[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    std::fs::write(&huge, &forged).unwrap();
    assert_eq!(SafetensorsFile::open(&ctx, &huge).unwrap_err().status(), Status::Corrupt);
    assert_eq!(SafetensorsFile::open(&ctx, "bad\0path").unwrap_err().status(), Status::InvalidArgument);

    let out = dir.path("out.safetensors");
    let e = save_safetensors(&out, &[("t", &t), ("t", &t)], &[]).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert_eq!(save_safetensors(&out, &[("__metadata__", &t)], &[]).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(save_safetensors(&out, &[("", &t)], &[]).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(save_safetensors(&out, &[("a\0b", &t)], &[]).unwrap_err().status(), Status::InvalidArgument);
    let e = save_safetensors(&out, &[("t", &t)], &[("k", "1"), ("k", "2")]).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert_eq!(save_safetensors(&out, &[("t", &t)], &[("k\0", "v")]).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(save_named_safetensors(&out, &[&t], &[]).unwrap_err().status(), Status::InvalidArgument);
    assert!(!out.exists(), "no refused save wrote a file");
    let e = save_safetensors(dir.path("no-such-folder/x.safetensors"), &[("t", &t)], &[]).unwrap_err();
    assert_eq!(e.status(), Status::Io);
    // An empty file is allowed.
    save_safetensors(&out, &[], &[]).unwrap();
    assert!(SafetensorsFile::open(&ctx, &out).unwrap().is_empty().unwrap());
}

/// `python3` when it can import the reference library, else why not.
fn reference_python() -> Result<(), String> {
    let probe = Command::new("python3").args(["-c", "import numpy, safetensors.numpy"]).output();
    match probe {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!("python3 cannot import safetensors: {}", String::from_utf8_lossy(&out.stderr).trim())),
        Err(e) => Err(format!("python3 cannot run: {e}")),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn python(script: &str, args: &[&str]) -> String {
    let out = Command::new("python3").arg("-c").arg(script).args(args).output().unwrap();
    assert!(out.status.success(), "python3 failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Writes a file with the reference library from bytes given here (numpy has
/// no bf16: F32, F16, I32, I64 and U8, which ampx lists but cannot load).
const PYTHON_WRITE: &str = r#"
import sys, numpy as np
from safetensors.numpy import save_file
path, spec = sys.argv[1], sys.argv[2:]
tensors = {}
for item in spec:
    name, dtype, shape, data = item.split(":")
    shape = tuple(int(d) for d in shape.split("x")) if shape else ()
    tensors[name] = np.frombuffer(bytes.fromhex(data), dtype=dtype).reshape(shape)
save_file(tensors, path, metadata={"writer": "python", "format": "np"})
"#;

/// Reads a file with the reference library; prints name, dtype, shape and
/// the data's hex per tensor, and the metadata.
const PYTHON_READ: &str = r#"
import sys
from safetensors import safe_open
with safe_open(sys.argv[1], framework="np") as f:
    for key, value in sorted((f.metadata() or {}).items()):
        print("meta", key, value)
    for name in sorted(f.keys()):
        t = f.get_tensor(name)
        print("tensor", name, t.dtype.str, "x".join(map(str, t.shape)), t.tobytes().hex())
"#;

#[test]
fn files_of_the_reference_library_load_bit_for_bit_and_it_reads_ours() {
    if let Err(why) = reference_python() {
        eprintln!("skipped: {why} (bindings/python/deps.sh installs it)");
        return;
    }
    let ctx = Context::new().unwrap();
    let dir = TempDir::new("safetensors-python");

    // Python writes; ampx reads.
    let theirs = dir.path("theirs.safetensors");
    let spec = [
        ("w", "<f4", DType::F32, vec![2i64, 3]),
        ("h", "<f2", DType::F16, vec![5]),
        ("i", "<i4", DType::I32, vec![2, 2]),
        ("l", "<i8", DType::I64, vec![3]),
    ];
    let data: Vec<Vec<u8>> = spec.iter().enumerate().map(|(k, s)| random_bytes(100 + k as u64, numel(&s.3) * s.2.size())).collect();
    let mut args: Vec<String> = vec![theirs.to_str().unwrap().to_string()];
    for ((name, np, _, shape), bytes) in spec.iter().zip(&data) {
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        args.push(format!("{name}:{np}:{}:{}", dims.join("x"), hex(bytes)));
    }
    args.push(format!("u:u1:4:{}", hex(&[1, 2, 250, 255])));
    python(PYTHON_WRITE, &args.iter().map(String::as_str).collect::<Vec<_>>());
    let file = SafetensorsFile::open(&ctx, &theirs).unwrap();
    assert_eq!(
        file.metadata().unwrap(),
        vec![("format".into(), "np".into()), ("writer".into(), "python".into())]
    );
    assert_eq!(file.len().unwrap(), spec.len() + 1);
    for ((name, _, dtype, shape), bytes) in spec.iter().zip(&data) {
        let entry = file.entry(file.find(name).unwrap()).unwrap();
        assert_eq!((entry.dtype, &entry.shape), (Some(*dtype), shape));
        let t = file.load(name, false).unwrap();
        assert_eq!(&t.to_bytes().unwrap(), bytes, "{name}: the reference writer's bits");
    }
    let u = file.entry(file.find("u").unwrap()).unwrap();
    assert_eq!((u.dtype, u.dtype_name.as_str(), u.shape.as_slice(), u.nbytes), (None, "U8", &[4i64][..], 4));
    assert_eq!(file.load("u", false).unwrap_err().status(), Status::Dtype);

    // ampx writes; Python reads.
    let ours = dir.path("ours.safetensors");
    let tensors: Vec<(&str, Tensor)> = spec
        .iter()
        .zip(&data)
        .map(|((name, _, dtype, shape), bytes)| (*name, Tensor::from_bytes(&ctx, *dtype, shape, bytes).unwrap()))
        .collect();
    save_safetensors(&ours, &pairs(&tensors), &[("writer", "ampx")]).unwrap();
    let printed = python(PYTHON_READ, &[ours.to_str().unwrap()]);
    let mut expected = vec!["meta writer ampx".to_string()];
    let mut sorted: Vec<_> = spec.iter().zip(&data).collect();
    sorted.sort_by(|a, b| a.0 .0.cmp(b.0 .0));
    for ((name, np, _, shape), bytes) in sorted {
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        expected.push(format!("tensor {name} {np} {} {}", dims.join("x"), hex(bytes)));
    }
    assert_eq!(printed.lines().collect::<Vec<_>>(), expected);
}

#[test]
fn a_released_file_handle_is_refused_not_used() {
    let ctx = Context::new().unwrap();
    let dir = TempDir::new("safetensors-released");
    let path = dir.path("t.safetensors");
    let t = Tensor::from_slice(&ctx, &[2], &[1.0f32, 2.0]).unwrap();
    save_safetensors(&path, &[("t", &t)], &[]).unwrap();
    let file = SafetensorsFile::open(&ctx, &path).unwrap();
    let raw = file.as_raw();
    drop(file);
    let mut count = 0;
    // SAFETY: ampx validates handles; a released one is STALE_HANDLE.
    let status = unsafe { ampx::sys::ampx_safetensors_count(raw, &mut count) };
    assert_eq!(status, ampx::sys::AMPX_ERR_STALE_HANDLE);
}
