//! How long audio plays, from its bytes. Exact for wav (from the `fmt ` chunk and the data),
//! pcm (the speech API's raw 24 kHz, 16-bit mono) and flac (STREAMINFO's sample count); for
//! mp3 the sum over its frame headers (a VBR file's Xing frame counts as one silent frame).
//! opus and aac are not parsed: their duration is reported unknown.

use std::time::Duration;

/// The speech API's raw pcm: 24 000 samples a second, 2 bytes each, one channel.
const PCM_BYTES_PER_SECOND: u64 = 24_000 * 2;

/// The duration of `bytes` in `format`, or why it cannot be told.
pub fn audio_duration(format: &str, bytes: &[u8]) -> Result<Duration, String> {
    match format {
        "wav" => wav(bytes),
        "pcm" => Ok(seconds(bytes.len() as u64, PCM_BYTES_PER_SECOND)),
        "flac" => flac(bytes),
        "mp3" => mp3(bytes),
        other => Err(format!("{other} is not parsed for its length")),
    }
}

fn seconds(units: u64, per_second: u64) -> Duration {
    let whole = units / per_second;
    let rest = units % per_second;
    Duration::from_secs(whole) + Duration::from_nanos(rest * 1_000_000_000 / per_second)
}

fn u16_le(b: &[u8], at: usize) -> Option<u64> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?) as u64)
}

fn u32_le(b: &[u8], at: usize) -> Option<u64> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?) as u64)
}

/// RIFF/WAVE: the data chunk's bytes over the byte rate of the `fmt ` chunk. A streamed file
/// may carry a placeholder size (0 or 0xFFFFFFFF) in its data header: then the data is
/// whatever follows it.
fn wav(b: &[u8]) -> Result<Duration, String> {
    if b.len() < 12 || &b[..4] != b"RIFF" || &b[8..12] != b"WAVE" {
        return Err("the bytes are no RIFF/WAVE file".into());
    }
    let mut at = 12;
    let mut byte_rate = None;
    while at + 8 <= b.len() {
        let id = &b[at..at + 4];
        let size = u32_le(b, at + 4).unwrap_or(0);
        let body = at + 8;
        if id == b"fmt " {
            let channels = u16_le(b, body + 2).ok_or("a cut-off fmt chunk")?;
            let rate = u32_le(b, body + 4).ok_or("a cut-off fmt chunk")?;
            let bits = u16_le(b, body + 14).ok_or("a cut-off fmt chunk")?;
            let frame = channels * bits.div_ceil(8);
            if rate == 0 || frame == 0 {
                return Err("the fmt chunk names no sample rate or sample size".into());
            }
            byte_rate = Some(rate * frame);
        } else if id == b"data" {
            let rate = byte_rate.ok_or("the data chunk comes before any fmt chunk")?;
            let left = (b.len() - body) as u64;
            let data = if size == 0 || size == 0xFFFF_FFFF || size > left {
                left
            } else {
                size
            };
            return Ok(seconds(data, rate));
        }
        // Chunks are padded to an even size.
        at = body.saturating_add(usize::try_from(size + (size & 1)).unwrap_or(usize::MAX));
    }
    Err("the file has no data chunk".into())
}

/// FLAC: STREAMINFO (always the first metadata block) holds the sample rate and the total.
fn flac(b: &[u8]) -> Result<Duration, String> {
    if b.len() < 4 + 4 + 34 || &b[..4] != b"fLaC" || b[4] & 0x7f != 0 {
        return Err("the bytes are no FLAC file with a STREAMINFO block".into());
    }
    let info = &b[8..8 + 34];
    let rate =
        (u64::from(info[10]) << 12) | (u64::from(info[11]) << 4) | (u64::from(info[12]) >> 4);
    let total = ((u64::from(info[13]) & 0x0f) << 32)
        | (u64::from(info[14]) << 24)
        | (u64::from(info[15]) << 16)
        | (u64::from(info[16]) << 8)
        | u64::from(info[17]);
    if rate == 0 || total == 0 {
        return Err("its STREAMINFO does not give the length (a streamed FLAC)".into());
    }
    Ok(seconds(total, rate))
}

/// MPEG audio: walk the frames from the first header (after an ID3v2 tag), summing each
/// frame's samples over its sample rate.
fn mp3(b: &[u8]) -> Result<Duration, String> {
    let mut at = 0;
    if b.len() >= 10 && &b[..3] == b"ID3" {
        let size = b[6..10]
            .iter()
            .fold(0usize, |acc, &x| (acc << 7) | usize::from(x & 0x7f));
        at = 10 + size + if b[5] & 0x10 != 0 { 10 } else { 0 };
    }
    let mut nanos: u128 = 0;
    let mut frames = 0u64;
    while at + 4 <= b.len() {
        let Some((length, samples, rate)) = mp3_frame(&b[at..at + 4]) else {
            if frames == 0 {
                // Junk before the first frame: look for the next sync.
                at += 1;
                continue;
            }
            break;
        };
        frames += 1;
        nanos += u128::from(samples) * 1_000_000_000 / u128::from(rate);
        at += length;
    }
    if frames == 0 {
        return Err("no MPEG audio frame was found".into());
    }
    Ok(Duration::from_nanos(
        u64::try_from(nanos).unwrap_or(u64::MAX),
    ))
}

/// One MPEG audio frame header: (frame bytes, samples, sample rate), or `None` when `h` is no
/// valid header.
fn mp3_frame(h: &[u8]) -> Option<(usize, u32, u32)> {
    if h[0] != 0xff || h[1] & 0xe0 != 0xe0 {
        return None;
    }
    let version = (h[1] >> 3) & 3; // 0: 2.5, 2: 2, 3: 1
    let layer = (h[1] >> 1) & 3; // 1: III, 2: II, 3: I
    let bitrate_index = usize::from(h[2] >> 4);
    let rate_index = usize::from((h[2] >> 2) & 3);
    let padding = u32::from((h[2] >> 1) & 1);
    if version == 1 || layer == 0 || bitrate_index == 0 || bitrate_index == 15 || rate_index == 3 {
        return None;
    }
    let mpeg1 = version == 3;
    const RATES: [u32; 3] = [44_100, 48_000, 32_000];
    let rate = RATES[rate_index]
        >> match version {
            3 => 0,
            2 => 1,
            _ => 2,
        };
    const V1_L1: [u32; 15] = [
        0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448,
    ];
    const V1_L2: [u32; 15] = [
        0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384,
    ];
    const V1_L3: [u32; 15] = [
        0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320,
    ];
    const V2_L1: [u32; 15] = [
        0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256,
    ];
    const V2_L23: [u32; 15] = [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160];
    let kbps = match (mpeg1, layer) {
        (true, 3) => V1_L1,
        (true, 2) => V1_L2,
        (true, _) => V1_L3,
        (false, 3) => V2_L1,
        (false, _) => V2_L23,
    }[bitrate_index];
    let bitrate = kbps * 1000;
    let (length, samples) = match layer {
        3 => ((12 * bitrate / rate + padding) * 4, 384),
        2 => (144 * bitrate / rate + padding, 1152),
        _ if mpeg1 => (144 * bitrate / rate + padding, 1152),
        _ => (72 * bitrate / rate + padding, 576),
    };
    (length >= 4).then_some((length as usize, samples, rate))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// A WAVE file of `samples` frames of `channels` × 16-bit at `rate`, with the data size
    /// written as `data_size` (the real size when `None`).
    pub fn wav_file(rate: u32, channels: u16, samples: u32, data_size: Option<u32>) -> Vec<u8> {
        let data_len = samples * u32::from(channels) * 2;
        let mut out = Vec::new();
        out.extend_from_slice(b"RIFF");
        out.extend_from_slice(&(36 + data_len).to_le_bytes());
        out.extend_from_slice(b"WAVEfmt ");
        out.extend_from_slice(&16u32.to_le_bytes());
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&channels.to_le_bytes());
        out.extend_from_slice(&rate.to_le_bytes());
        out.extend_from_slice(&(rate * u32::from(channels) * 2).to_le_bytes());
        out.extend_from_slice(&(channels * 2).to_le_bytes());
        out.extend_from_slice(&16u16.to_le_bytes());
        // A chunk of another kind with an odd size: skipped, padding included.
        out.extend_from_slice(b"LIST");
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(b"abc\0");
        out.extend_from_slice(b"data");
        out.extend_from_slice(&data_size.unwrap_or(data_len).to_le_bytes());
        out.extend((0..data_len).map(|i| i as u8));
        out
    }

    #[test]
    fn wav_duration_is_exact_from_its_header_also_with_a_streamed_size() {
        let exact = wav_file(24_000, 1, 36_000, None);
        assert_eq!(
            audio_duration("wav", &exact),
            Ok(Duration::from_millis(1500))
        );
        let stereo = wav_file(44_100, 2, 44_100 * 3, None);
        assert_eq!(audio_duration("wav", &stereo), Ok(Duration::from_secs(3)));
        let streamed = wav_file(24_000, 1, 12_000, Some(0xFFFF_FFFF));
        assert_eq!(
            audio_duration("wav", &streamed),
            Ok(Duration::from_millis(500))
        );
        assert!(audio_duration("wav", b"RIFF\0\0\0\0WAVE").is_err());
        assert!(audio_duration("wav", b"not a wave").is_err());
    }

    #[test]
    fn pcm_is_24khz_16bit_mono() {
        assert_eq!(
            audio_duration("pcm", &vec![0; 48_000 * 2 + 24]),
            Ok(Duration::from_millis(2000) + Duration::from_micros(500))
        );
    }

    #[test]
    fn flac_reads_streaminfo() {
        let mut b = b"fLaC".to_vec();
        b.extend_from_slice(&[0x80, 0, 0, 34]);
        let mut info = [0u8; 34];
        // 48 000 Hz (20 bits), 2 channels, 16 bits, 120 000 samples.
        let rate: u64 = 48_000;
        let total: u64 = 120_000;
        info[10] = (rate >> 12) as u8;
        info[11] = (rate >> 4) as u8;
        info[12] = ((rate & 0xf) << 4) as u8 | (1 << 1);
        info[13] = (15 << 4) as u8 | ((total >> 32) & 0xf) as u8;
        info[14..18].copy_from_slice(&(total as u32).to_be_bytes());
        b.extend_from_slice(&info);
        assert_eq!(audio_duration("flac", &b), Ok(Duration::from_millis(2500)));
    }

    #[test]
    fn mp3_sums_its_frames_after_an_id3_tag() {
        // MPEG-1 Layer III, 128 kbps, 44.1 kHz, no padding: 417 bytes, 1152 samples a frame.
        let mut b = b"ID3\x04\0\0\0\0\0\x05hello".to_vec();
        for _ in 0..100 {
            let mut frame = vec![0u8; 417];
            frame[..4].copy_from_slice(&[0xff, 0xfb, 0x90, 0x00]);
            b.extend_from_slice(&frame);
        }
        let d = audio_duration("mp3", &b).unwrap();
        assert_eq!(d.as_micros(), 100 * 1152 * 1_000_000 / 44_100);
        assert!(audio_duration("mp3", b"no frames here").is_err());
    }

    #[test]
    fn other_formats_say_they_are_not_parsed() {
        assert_eq!(
            audio_duration("opus", b"OggS"),
            Err("opus is not parsed for its length".to_string())
        );
    }
}
