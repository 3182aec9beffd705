/// What a command that writes artifacts prints of them: its text summary, JSON, or nothing
/// (when another command's report includes them, as `exporter <model> --compile --json` does).
enum OutputStyle {
    case text, json, none
}
