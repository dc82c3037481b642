//! WAV files in and out (hound): fixtures are read as mono PCM16 at their own rate (or with their
//! channels kept, for recordings); recordings are written as mono or stereo PCM16. hound parses
//! every header; 16-bit samples are read and written a chunk at a time, not a call per sample.
//! Every error names the file.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// A WAV file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum WavError {
    #[error("{path}: not a readable WAV file: {source}")]
    Read { path: PathBuf, source: hound::Error },
    #[error("{path}: not a readable WAV file: {what}")]
    Short { path: PathBuf, what: String },
    #[error("{path}: unsupported WAV format: {what}")]
    Format { path: PathBuf, what: String },
    #[error("{path}: cannot write WAV: {source}")]
    Write { path: PathBuf, source: hound::Error },
}

/// Mono PCM16 audio with its sample rate.
#[derive(Clone, Debug, PartialEq)]
pub struct Pcm {
    pub rate: u32,
    pub samples: Vec<i16>,
}

impl Pcm {
    pub fn duration(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.samples.len() as f64 / f64::from(self.rate.max(1)))
    }
}

/// A WAV file's samples as PCM16, channels interleaved.
#[derive(Clone, Debug, PartialEq)]
pub struct Interleaved {
    pub rate: u32,
    pub channels: usize,
    pub samples: Vec<i16>,
}

impl Interleaved {
    /// Channel `c` (from 0, below `channels`) alone.
    pub fn channel(&self, c: usize) -> Vec<i16> {
        assert!(c < self.channels, "channel {c} of {}", self.channels);
        self.samples
            .iter()
            .skip(c)
            .step_by(self.channels)
            .copied()
            .collect()
    }

    /// All channels mixed down to one (their mean).
    fn mono(self) -> Pcm {
        let channels = self.channels;
        let samples = if channels == 1 {
            self.samples
        } else {
            self.samples
                .chunks_exact(channels)
                .map(|c| (c.iter().map(|&s| i32::from(s)).sum::<i32>() / channels as i32) as i16)
                .collect()
        };
        Pcm {
            rate: self.rate,
            samples,
        }
    }
}

/// Reads a WAV file of any rate, 8/16/24/32-bit integer or 32-bit float, any channel count,
/// mixed down to mono PCM16.
pub fn read(path: &Path) -> Result<Pcm, WavError> {
    read_interleaved(path).map(Interleaved::mono)
}

/// [`read`] for WAV bytes already in memory; `name` labels errors.
pub fn parse(bytes: &[u8], name: &Path) -> Result<Pcm, WavError> {
    read_from(std::io::Cursor::new(bytes), name).map(Interleaved::mono)
}

/// [`read`] with every channel kept (a call recording: the caller left, what they heard right).
pub fn read_interleaved(path: &Path) -> Result<Interleaved, WavError> {
    let file = std::fs::File::open(path).map_err(|e| WavError::Read {
        path: path.to_path_buf(),
        source: hound::Error::IoError(e),
    })?;
    read_from(std::io::BufReader::new(file), path)
}

/// The sample formats [`read`] takes, for messages.
const READABLE: &str = "baton reads 8, 16, 24 or 32-bit integer or 32-bit float PCM";

/// Largest number of samples read from one file (an hour of 48 kHz stereo): a header claiming
/// more is refused before anything is allocated for it.
pub const MAX_SAMPLES: u64 = 48_000 * 2 * 3600;

/// The reader ran out of bytes: hound says so as an `Other` I/O error in its own words
/// ("Failed to read enough bytes."), the standard library as `UnexpectedEof`.
fn cut_short(e: &hound::Error) -> bool {
    matches!(e, hound::Error::IoError(io)
        if io.kind() == std::io::ErrorKind::UnexpectedEof
            || io.to_string().starts_with("Failed to read enough bytes"))
}

/// The `len` samples of a 16-bit data chunk in one read, from `r` positioned at the chunk's
/// first byte (where hound leaves it), rather than a read call per sample; `None` when the
/// samples are stored wider than two bytes (or `r` is not where a data chunk starts). The
/// chunk's id and size are the eight bytes before its data.
fn pcm16_data<R: Read + Seek>(r: &mut R, len: u32) -> std::io::Result<Option<Vec<i16>>> {
    let start = r.stream_position()?;
    let Some(header_at) = start.checked_sub(8) else {
        return Ok(None);
    };
    r.seek(SeekFrom::Start(header_at))?;
    let mut header = [0u8; 8];
    r.read_exact(&mut header)?;
    let size = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if &header[..4] != b"data" || size / 2 != len {
        return Ok(None);
    }
    let want = 2 * u64::from(len);
    let mut bytes = Vec::new();
    r.take(want).read_to_end(&mut bytes)?;
    if (bytes.len() as u64) < want {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(Some(
        bytes
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]))
            .collect(),
    ))
}

fn read_from<R: Read + Seek>(reader: R, path: &Path) -> Result<Interleaved, WavError> {
    let read_err = |source| WavError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut reader = hound::WavReader::new(reader).map_err(|e| match e {
        e if cut_short(&e) => WavError::Short {
            path: path.to_path_buf(),
            what: "it ends inside its header (an empty or cut-short file)".into(),
        },
        // hound's words for float samples of another width.
        hound::Error::FormatError("bits per sample is not 32") => WavError::Format {
            path: path.to_path_buf(),
            what: format!(
                "floating-point samples wider or narrower than 32 bits ({READABLE}; e.g. \
                 `sox in.wav -b 32 -e floating-point out.wav`)"
            ),
        },
        hound::Error::Unsupported => WavError::Format {
            path: path.to_path_buf(),
            what: format!(
                "a compressed or unknown encoding, such as μ-law, A-law or ADPCM ({READABLE}; \
                 e.g. `sox in.wav -e signed-integer -b 16 out.wav`)"
            ),
        },
        e => read_err(e),
    })?;
    let announced = reader.len();
    let read_err = |e| match e {
        e if cut_short(&e) => WavError::Short {
            path: path.to_path_buf(),
            what: format!(
                "it ends before the {announced} samples its header announces (a cut-short file)"
            ),
        },
        e => read_err(e),
    };
    let spec = reader.spec();
    let channels = usize::from(spec.channels);
    if channels == 0 || spec.sample_rate == 0 {
        return Err(WavError::Format {
            path: path.to_path_buf(),
            what: format!("{} channels at {} Hz", spec.channels, spec.sample_rate),
        });
    }
    if u64::from(reader.len()) > MAX_SAMPLES {
        return Err(WavError::Format {
            path: path.to_path_buf(),
            what: format!(
                "the header announces {} samples, over the limit of {MAX_SAMPLES} (one hour of 48 kHz stereo)",
                reader.len()
            ),
        });
    }
    let as_i16: Vec<i16> = match (spec.sample_format, spec.bits_per_sample) {
        (hound::SampleFormat::Int, 16) => {
            let mut inner = reader.into_inner();
            match pcm16_data(&mut inner, announced)
                .map_err(|e| read_err(hound::Error::IoError(e)))?
            {
                Some(samples) => samples,
                // 16 bits in a wider container: hound's own sample reader, from the top.
                None => {
                    inner
                        .seek(SeekFrom::Start(0))
                        .map_err(|e| read_err(hound::Error::IoError(e)))?;
                    hound::WavReader::new(inner)
                        .map_err(read_err)?
                        .samples::<i16>()
                        .collect::<Result<_, _>>()
                        .map_err(read_err)?
                }
            }
        }
        (hound::SampleFormat::Int, bits @ (8 | 24 | 32)) => {
            let shift = i32::from(bits) - 16;
            reader
                .samples::<i32>()
                .map(|s| {
                    s.map(|v| {
                        if shift >= 0 {
                            (v >> shift) as i16
                        } else {
                            (v << -shift) as i16
                        }
                    })
                })
                .collect::<Result<_, _>>()
                .map_err(read_err)?
        }
        (hound::SampleFormat::Float, 32) => reader
            .samples::<f32>()
            .map(|s| s.map(|v| (v.clamp(-1.0, 1.0) * 32767.0).round() as i16))
            .collect::<Result<_, _>>()
            .map_err(read_err)?,
        (fmt, bits) => {
            return Err(WavError::Format {
                path: path.to_path_buf(),
                what: format!("{bits}-bit {fmt:?} samples ({READABLE})"),
            });
        }
    };
    Ok(Interleaved {
        rate: spec.sample_rate,
        channels,
        samples: as_i16,
    })
}

/// Writes mono PCM16.
pub fn write_mono(path: &Path, rate: u32, samples: &[i16]) -> Result<(), WavError> {
    write_interleaved(path, rate, 1, samples.len(), |i| samples[i])
}

/// Writes a stereo PCM16 file from two channels of equal rate; the shorter one is padded with
/// silence.
pub fn write_stereo(path: &Path, rate: u32, left: &[i16], right: &[i16]) -> Result<(), WavError> {
    let n = left.len().max(right.len());
    write_interleaved(path, rate, 2, 2 * n, |i| {
        let channel = if i % 2 == 0 { left } else { right };
        channel.get(i / 2).copied().unwrap_or(0)
    })
}

/// Samples handed to hound's 16-bit writer at a time (64 KiB of its buffer).
const WRITE_CHUNK: usize = 32 * 1024;

/// Writes `len` interleaved samples, the `i`th being `sample(i)`.
fn write_interleaved(
    path: &Path,
    rate: u32,
    channels: u16,
    len: usize,
    sample: impl Fn(usize) -> i16,
) -> Result<(), WavError> {
    let write_err = |source| WavError::Write {
        path: path.to_path_buf(),
        source,
    };
    // The RIFF sizes are 32-bit: a longer recording cannot be one WAV file.
    if len as u64 * 2 > u64::from(u32::MAX) - 64 {
        return Err(write_err(hound::Error::IoError(std::io::Error::other(
            format!("{len} samples are over the 4 GiB a WAV file can hold"),
        ))));
    }
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).map_err(write_err)?;
    for start in (0..len).step_by(WRITE_CHUNK) {
        let end = (start + WRITE_CHUNK).min(len);
        // Fits: at most WRITE_CHUNK.
        let mut chunk = w.get_i16_writer((end - start) as u32);
        for i in start..end {
            chunk.write_sample(sample(i));
        }
        chunk.flush().map_err(write_err)?;
    }
    w.finalize().map_err(write_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_mono_and_stereo_mixdown() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.wav");
        write_mono(&p, 16000, &[1, -2, 300, i16::MIN, i16::MAX]).unwrap();
        let pcm = read(&p).unwrap();
        assert_eq!(
            pcm,
            Pcm {
                rate: 16000,
                samples: vec![1, -2, 300, i16::MIN, i16::MAX]
            }
        );

        let s = dir.path().join("s.wav");
        write_stereo(&s, 8000, &[100, 200, 300], &[300, 400]).unwrap();
        let pcm = read(&s).unwrap();
        assert_eq!(pcm.rate, 8000);
        assert_eq!(pcm.samples, vec![200, 300, 150]);
    }

    #[test]
    fn long_files_round_trip_across_write_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("long.wav");
        let n = 2 * WRITE_CHUNK + 123;
        let left: Vec<i16> = (0..n)
            .map(|i| (i as i64 * 7919 % 65_536 - 32_768) as i16)
            .collect();
        let right: Vec<i16> = left.iter().map(|&s| s.wrapping_neg()).collect();
        write_mono(&p, 16000, &left).unwrap();
        assert_eq!(read(&p).unwrap().samples, left);
        // hound's own sample reader agrees with the whole-chunk one.
        let theirs: Vec<i16> = hound::WavReader::open(&p)
            .unwrap()
            .samples::<i16>()
            .map(Result::unwrap)
            .collect();
        assert_eq!(theirs, left);
        write_stereo(&p, 8000, &left, &right[..n - 5]).unwrap();
        let mut r = hound::WavReader::open(&p).unwrap();
        assert_eq!(r.spec().channels, 2);
        let all: Vec<i16> = r.samples::<i16>().map(Result::unwrap).collect();
        assert_eq!(all.len(), 2 * n);
        let heard_left: Vec<i16> = all.iter().step_by(2).copied().collect();
        let heard_right: Vec<i16> = all.iter().skip(1).step_by(2).copied().collect();
        assert_eq!(heard_left, left);
        // The shorter channel is padded with silence.
        assert_eq!(heard_right[..n - 5], right[..n - 5]);
        assert_eq!(heard_right[n - 5..], [0; 5]);
    }

    #[test]
    fn sixteen_bits_stored_in_four_bytes_are_not_read_as_two_byte_samples() {
        // PCM, mono, 8 kHz, 16 valid bits in 4-byte blocks (hound writes no such file).
        let values = [1i16, -2, 300, i16::MIN, i16::MAX];
        let mut bytes = Vec::new();
        bytes.extend_from_slice(b"RIFF");
        bytes.extend_from_slice(&(36 + 4 * values.len() as u32).to_le_bytes());
        bytes.extend_from_slice(b"WAVEfmt ");
        bytes.extend_from_slice(&16u32.to_le_bytes());
        for v in [1u16, 1] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes.extend_from_slice(&8000u32.to_le_bytes());
        bytes.extend_from_slice(&32_000u32.to_le_bytes());
        for v in [4u16, 16] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes.extend_from_slice(b"data");
        bytes.extend_from_slice(&(4 * values.len() as u32).to_le_bytes());
        for v in values {
            bytes.extend_from_slice(&i32::from(v).to_le_bytes());
        }
        // The data chunk is not read two bytes a sample (that would be garbage): hound's own
        // reader has it, and refuses samples wider than the type they are read into.
        let err = parse(&bytes, Path::new("wide.wav"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "wide.wav: not a readable WAV file: {}",
                hound::Error::TooWide
            )
        );
    }

    #[test]
    fn garbage_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("garbage.wav");
        std::fs::write(&p, b"RIFF\x10\x00\x00\x00WAVEjunkjunk").unwrap();
        let err = read(&p).unwrap_err().to_string();
        assert!(err.contains("garbage.wav"), "{err}");
        let missing = read(&dir.path().join("nope.wav")).unwrap_err().to_string();
        assert!(missing.contains("nope.wav"), "{missing}");
    }

    #[test]
    fn a_file_cut_short_says_so() {
        let name = Path::new("short.wav");
        let empty = parse(b"", name).unwrap_err().to_string();
        assert_eq!(
            empty,
            "short.wav: not a readable WAV file: it ends inside its header (an empty or cut-short file)"
        );
        // A whole header announcing 1000 samples of 16-bit mono, and the bytes of three.
        let dir = tempfile::tempdir().unwrap();
        let whole = dir.path().join("whole.wav");
        write_mono(&whole, 8000, &[1; 1000]).unwrap();
        let bytes = std::fs::read(&whole).unwrap();
        let cut = parse(&bytes[..44 + 6], name).unwrap_err().to_string();
        assert!(
            cut.contains("it ends before the 1000 samples its header announces"),
            "{cut}"
        );
    }
}
