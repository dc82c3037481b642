//! The real microphone and speaker through cpal (ALSA on Linux). The streams are built and kept on
//! the device thread (cpal streams may not move between threads); the callbacks convert the
//! device's sample format to and from the rings of [`super::ring`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cpal::traits::{DeviceTrait, HostTrait, StreamTrait};
use cpal::{FromSample, SampleFormat, SizedSample};

use super::{AudioDevice, Capture, DeviceError, DeviceFormat, Playback};

/// The host's input and output devices with their default configurations.
pub struct CpalDevice {
    input: cpal::Device,
    output: cpal::Device,
    in_cfg: cpal::SupportedStreamConfig,
    out_cfg: cpal::SupportedStreamConfig,
}

fn backend(what: &str, e: impl std::fmt::Display) -> DeviceError {
    DeviceError::Backend {
        what: what.to_owned(),
        reason: e.to_string(),
    }
}

/// Input and output device names (`baton talk --list-devices`).
pub fn list() -> Result<Vec<String>, DeviceError> {
    let host = cpal::default_host();
    let mut out = Vec::new();
    for d in host.devices().map_err(|e| backend("listing devices", e))? {
        let dir = match (d.supports_input(), d.supports_output()) {
            (true, true) => "in/out",
            (true, false) => "in",
            (false, true) => "out",
            (false, false) => continue,
        };
        out.push(format!("{dir:6} {d}"));
    }
    Ok(out)
}

impl CpalDevice {
    /// The default devices, or the ones whose name contains `input` / `output`.
    pub fn open(input: Option<&str>, output: Option<&str>) -> Result<Self, DeviceError> {
        let host = cpal::default_host();
        let find = |want: &str, is_in: bool| -> Result<cpal::Device, DeviceError> {
            let devices = host.devices().map_err(|e| backend("listing devices", e))?;
            devices
                .filter(|d| {
                    if is_in {
                        d.supports_input()
                    } else {
                        d.supports_output()
                    }
                })
                .find(|d| d.to_string().contains(want))
                .ok_or(DeviceError::NoDevice(if is_in {
                    "matching input"
                } else {
                    "matching output"
                }))
        };
        let input = match input {
            Some(name) => find(name, true)?,
            None => host
                .default_input_device()
                .ok_or(DeviceError::NoDevice("input"))?,
        };
        let output = match output {
            Some(name) => find(name, false)?,
            None => host
                .default_output_device()
                .ok_or(DeviceError::NoDevice("output"))?,
        };
        let in_cfg = input
            .default_input_config()
            .map_err(|e| backend("input config", e))?;
        let out_cfg = output
            .default_output_config()
            .map_err(|e| backend("output config", e))?;
        Ok(CpalDevice {
            input,
            output,
            in_cfg,
            out_cfg,
        })
    }

    /// The devices in use, for the terminal.
    pub fn describe(&self) -> String {
        format!(
            "microphone {} ({} Hz, {} ch), speaker {} ({} Hz, {} ch)",
            self.input,
            self.in_cfg.sample_rate(),
            self.in_cfg.channels(),
            self.output,
            self.out_cfg.sample_rate(),
            self.out_cfg.channels()
        )
    }
}

fn input_stream<T>(
    dev: &cpal::Device,
    cfg: cpal::StreamConfig,
    mut cap: Capture,
) -> Result<cpal::Stream, DeviceError>
where
    T: SizedSample,
    f32: FromSample<T>,
{
    // Converted in a fixed stack block: the callback must not allocate.
    dev.build_input_stream::<T, _, _>(
        cfg,
        move |data: &[T], _| {
            let mut block = [0f32; 1024];
            for chunk in data.chunks(1024 / cap.channels().max(1) * cap.channels().max(1)) {
                for (o, s) in block.iter_mut().zip(chunk) {
                    *o = s.to_sample::<f32>();
                }
                cap.write_f32(&block[..chunk.len()]);
            }
        },
        |e| tracing::warn!(error = %e, "microphone stream error"),
        None,
    )
    .map_err(|e| backend("opening the microphone", e))
}

fn output_stream<T>(
    dev: &cpal::Device,
    cfg: cpal::StreamConfig,
    mut play: Playback,
) -> Result<cpal::Stream, DeviceError>
where
    T: SizedSample + FromSample<f32>,
{
    dev.build_output_stream::<T, _, _>(
        cfg,
        move |data: &mut [T], _| {
            let mut block = [0f32; 1024];
            let step = 1024 / play.channels().max(1) * play.channels().max(1);
            for chunk in data.chunks_mut(step) {
                let b = &mut block[..chunk.len()];
                play.read_f32(b);
                for (o, s) in chunk.iter_mut().zip(b.iter()) {
                    *o = T::from_sample(*s);
                }
            }
        },
        |e| tracing::warn!(error = %e, "speaker stream error"),
        None,
    )
    .map_err(|e| backend("opening the speaker", e))
}

impl AudioDevice for CpalDevice {
    fn input_format(&self) -> DeviceFormat {
        DeviceFormat {
            rate: self.in_cfg.sample_rate(),
            channels: usize::from(self.in_cfg.channels()),
        }
    }

    fn output_format(&self) -> DeviceFormat {
        DeviceFormat {
            rate: self.out_cfg.sample_rate(),
            channels: usize::from(self.out_cfg.channels()),
        }
    }

    fn run(
        self: Box<Self>,
        capture: Capture,
        playback: Playback,
        stop: Arc<AtomicBool>,
    ) -> Result<(), DeviceError> {
        let in_cfg = self.in_cfg.config();
        let out_cfg = self.out_cfg.config();
        let input = match self.in_cfg.sample_format() {
            SampleFormat::F32 => input_stream::<f32>(&self.input, in_cfg, capture)?,
            SampleFormat::I16 => input_stream::<i16>(&self.input, in_cfg, capture)?,
            SampleFormat::I32 => input_stream::<i32>(&self.input, in_cfg, capture)?,
            SampleFormat::U16 => input_stream::<u16>(&self.input, in_cfg, capture)?,
            f => {
                return Err(backend(
                    "microphone",
                    format!("sample format {f} is not handled"),
                ));
            }
        };
        let output = match self.out_cfg.sample_format() {
            SampleFormat::F32 => output_stream::<f32>(&self.output, out_cfg, playback)?,
            SampleFormat::I16 => output_stream::<i16>(&self.output, out_cfg, playback)?,
            SampleFormat::I32 => output_stream::<i32>(&self.output, out_cfg, playback)?,
            SampleFormat::U16 => output_stream::<u16>(&self.output, out_cfg, playback)?,
            f => {
                return Err(backend(
                    "speaker",
                    format!("sample format {f} is not handled"),
                ));
            }
        };
        input
            .play()
            .map_err(|e| backend("starting the microphone", e))?;
        output
            .play()
            .map_err(|e| backend("starting the speaker", e))?;
        while !stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }
}
