//! generate_image and generate_audio through the real `tooldispatch round` process, against
//! the scripted OpenAI server on 127.0.0.1 the config file names: the files hold the bytes
//! served, the model entry is the first OpenAI one (or the one [media] names), and the key,
//! read from the environment, is in no output and nowhere on disk.

use base64::Engine as _;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::agent::{Scripted, scripted_server};
use super::support::*;

const KEY: &str = "sk-media-e2e-5d1c9a7b-never-shown";

fn run_tool(id: &str, tool: &str, args: Value) -> Value {
    json!({"id": id, "type": "function",
           "function": {"name": "run_tool", "arguments": json!({"name": tool, "args": args}).to_string()}})
}

/// A mono 16-bit WAVE of `samples` samples at 24 kHz.
fn wav(samples: u32) -> Vec<u8> {
    let data = samples * 2;
    let mut out = b"RIFF".to_vec();
    out.extend_from_slice(&(36 + data).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&[1, 0, 1, 0]);
    out.extend_from_slice(&24_000u32.to_le_bytes());
    out.extend_from_slice(&48_000u32.to_le_bytes());
    out.extend_from_slice(&[2, 0, 16, 0]);
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data.to_le_bytes());
    out.extend((0..data).map(|i| (i % 253) as u8));
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// Every file under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn a_round_generates_an_image_and_speech_through_the_configured_openai_server() {
    let td = Td::new();
    let mut image = b"\x89PNG\r\n\x1a\n".to_vec();
    image.extend((0..3000u32).map(|i| (i * 7 % 256) as u8));
    let audio = wav(12_000);
    let b64 = base64::engine::general_purpose::STANDARD.encode(&image);
    let (base, _, heard) = scripted_server(
        vec![
            Scripted::new(
                200,
                "application/json",
                json!({"data": [{"b64_json": b64}]})
                    .to_string()
                    .into_bytes(),
            ),
            Scripted::new(200, "audio/wav", audio.clone()),
        ],
        || {
            Scripted::new(
                500,
                "application/json",
                br#"{"error":{"message":"no scripted reply left"}}"#.to_vec(),
            )
        },
    );
    // The chat model comes first; the image model is the first OpenAI entry, speech is named.
    let config = td.file(
        "config.toml",
        &format!(
            "[models.chat]\nprovider = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\nkey = \"none\"\n\n\
             [models.img]\nprovider = \"openai\"\nmodel = \"gpt-image-1\"\nbase_url = \"{base}\"\nkey = \"env:TD_MEDIA_KEY\"\n\n\
             [models.voice]\nprovider = \"openai\"\nmodel = \"gpt-4o-mini-tts\"\nbase_url = \"{base}\"\nkey = \"env:TD_MEDIA_KEY\"\n\n\
             [media]\naudio_model = \"voice\"\n"
        ),
    );
    let round = |run: &str, calls: Vec<Value>| {
        let reply = json!({"role": "assistant", "content": null, "tool_calls": calls});
        let output = td
            .cmd(&[
                "round",
                "--session",
                "m1",
                "--run",
                run,
                "--approve",
                "all",
                "--report",
            ])
            .arg("--config")
            .arg(&config)
            .env("TD_MEDIA_KEY", KEY)
            .write_stdin(reply.to_string())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{stderr}");
        (stdout, stderr)
    };
    let select = json!({"id": "c0", "type": "function",
        "function": {"name": "find_tools", "arguments": json!({"query": "select:generate_image,generate_audio"}).to_string()}});
    round("r1", vec![select]);
    let (stdout, stderr) = round(
        "r2",
        vec![
            run_tool(
                "c1",
                "generate_image",
                json!({"prompt": "A paper boat", "save_to": "boat.png"}),
            ),
            run_tool(
                "c2",
                "generate_audio",
                json!({"text": "Half a second", "voice": "coral"}),
            ),
        ],
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let results = report["results"].as_array().unwrap();
    let statuses: Vec<&str> = results
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["ok", "ok"], "{stdout}");
    let image_text = results[0]["content"].as_str().unwrap();
    assert!(
        image_text.starts_with("[generate_image] 1 image(s) loaded generated an image with [models.img] gpt-image-1 (3008 bytes, image/png); saved to "),
        "{image_text}"
    );
    assert!(image_text.ends_with(" and to boat.png"), "{image_text}");
    assert_eq!(
        results[0]["images"],
        json!([format!("data:image/png;base64,{b64}")])
    );
    assert_eq!(std::fs::read(td.workdir().join("boat.png")).unwrap(), image);
    let audio_text = results[1]["content"].as_str().unwrap();
    assert!(
        audio_text.starts_with("[generate_audio] generated wav speech with [models.voice] gpt-4o-mini-tts: 23.5 KiB, duration 0.500 s; saved to "),
        "{audio_text}"
    );
    // The deliverables hold what was served.
    let saved: Vec<std::path::PathBuf> = files_under(td.data_dir())
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("/deliverables/"))
        .collect();
    let mut kept: Vec<Vec<u8>> = saved.iter().map(|p| std::fs::read(p).unwrap()).collect();
    kept.sort();
    let mut served = vec![image.clone(), audio.clone()];
    served.sort();
    assert_eq!(kept, served, "{saved:?}");
    // What the server was sent.
    let heard = heard.lock().unwrap();
    let paths: Vec<&str> = heard.iter().map(|(p, _, _)| p.as_str()).collect();
    assert_eq!(paths, ["/v1/images/generations", "/v1/audio/speech"]);
    for (_, headers, _) in heard.iter() {
        assert!(
            headers.contains(&("authorization".to_string(), format!("Bearer {KEY}"))),
            "{headers:?}"
        );
    }
    let speech: Value = serde_json::from_slice(&heard[1].2).unwrap();
    assert_eq!(
        speech,
        json!({"model": "gpt-4o-mini-tts", "input": "Half a second", "voice": "coral", "response_format": "wav"})
    );
    // The key: not in the report, not in stderr, not in any file the process left.
    assert!(!stdout.contains(KEY) && !stderr.contains(KEY));
    let on_disk: Vec<_> = files_under(td.data_dir())
        .into_iter()
        .chain(files_under(&td.workdir()))
        .chain([td.store_path().to_path_buf()])
        .filter(|p| contains(&std::fs::read(p).unwrap_or_default(), KEY))
        .collect();
    assert!(on_disk.is_empty(), "the key is in {on_disk:?}");
}

#[test]
fn without_an_openai_model_the_tool_says_the_user_must_add_one() {
    let td = Td::new();
    let config = td.file(
        "config.toml",
        "[models.chat]\nprovider = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\nkey = \"none\"\n",
    );
    let select = json!({"id": "c0", "type": "function",
        "function": {"name": "find_tools", "arguments": json!({"query": "select:generate_image"}).to_string()}});
    let call = run_tool("c1", "generate_image", json!({"prompt": "A kite"}));
    let mut outputs = Vec::new();
    for (run, calls) in [("r1", vec![select]), ("r2", vec![call])] {
        let reply = json!({"role": "assistant", "content": null, "tool_calls": calls});
        let output = td
            .cmd(&[
                "round",
                "--session",
                "m1",
                "--run",
                run,
                "--approve",
                "all",
                "--report",
            ])
            .arg("--config")
            .arg(&config)
            .write_stdin(reply.to_string())
            .output()
            .unwrap();
        outputs.push(stdout_json(&output));
    }
    let result = &outputs[1]["results"][0];
    assert_eq!(result["status"], "failed");
    assert!(
        result["content"].as_str().unwrap().starts_with(
            "[generate_image] tool=generate_image failed: no OpenAI model is configured for image: the user must add a [models.<name>] entry with provider = \"openai\" and model = \"gpt-image-1\" to tooldispatch's config file and name it in [media] image_model"
        ),
        "{}",
        result["content"]
    );
}
