//! WAV files in and out (hound): fixtures are read as mono PCM16 at their own rate; recordings are
//! written as mono or stereo PCM16. Every error names the file.

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

/// Reads a WAV file of any rate, 8/16/24/32-bit integer or 32-bit float, any channel count,
/// mixed down to mono PCM16.
pub fn read(path: &Path) -> Result<Pcm, WavError> {
    let file = std::fs::File::open(path).map_err(|e| WavError::Read {
        path: path.to_path_buf(),
        source: hound::Error::IoError(e),
    })?;
    read_from(std::io::BufReader::new(file), path)
}

/// [`read`] for WAV bytes already in memory; `name` labels errors.
pub fn parse(bytes: &[u8], name: &Path) -> Result<Pcm, WavError> {
    read_from(std::io::Cursor::new(bytes), name)
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

fn read_from<R: std::io::Read>(reader: R, path: &Path) -> Result<Pcm, WavError> {
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
        (hound::SampleFormat::Int, 16) => reader
            .samples::<i16>()
            .collect::<Result<_, _>>()
            .map_err(read_err)?,
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
    let samples = if channels == 1 {
        as_i16
    } else {
        as_i16
            .chunks_exact(channels)
            .map(|c| (c.iter().map(|&s| i32::from(s)).sum::<i32>() / channels as i32) as i16)
            .collect()
    };
    Ok(Pcm {
        rate: spec.sample_rate,
        samples,
    })
}

/// Writes mono PCM16.
pub fn write_mono(path: &Path, rate: u32, samples: &[i16]) -> Result<(), WavError> {
    write_interleaved(path, rate, 1, samples.iter().copied())
}

/// Writes a stereo PCM16 file from two channels of equal rate; the shorter one is padded with
/// silence.
pub fn write_stereo(path: &Path, rate: u32, left: &[i16], right: &[i16]) -> Result<(), WavError> {
    let n = left.len().max(right.len());
    let frames = (0..n).flat_map(|i| {
        [
            left.get(i).copied().unwrap_or(0),
            right.get(i).copied().unwrap_or(0),
        ]
    });
    write_interleaved(path, rate, 2, frames)
}

fn write_interleaved(
    path: &Path,
    rate: u32,
    channels: u16,
    samples: impl Iterator<Item = i16>,
) -> Result<(), WavError> {
    let write_err = |source| WavError::Write {
        path: path.to_path_buf(),
        source,
    };
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).map_err(write_err)?;
    for s in samples {
        w.write_sample(s).map_err(write_err)?;
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
