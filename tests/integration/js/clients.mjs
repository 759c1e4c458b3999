// The unmodified replicate JS client (package.json pins it) against the gateway: one
// scenario per run, named by argv[2]; prints one JSON line with what it saw.
// Environment: CUTOVER_BASE_URL, CUTOVER_TOKEN, CUTOVER_MODEL, NODE_EXTRA_CA_CERTS.
import Replicate from "replicate";

const base = process.env.CUTOVER_BASE_URL;
const model = process.env.CUTOVER_MODEL;
const calls = [];
const fetch = async (url, init = {}) => {
  const response = await globalThis.fetch(url, init);
  calls.push({ method: init.method || "GET", path: new URL(String(url)).pathname, status: response.status });
  return response;
};
const replicate = new Replicate({ auth: process.env.CUTOVER_TOKEN, baseUrl: `${base}/v1`, fetch });

async function stream() {
  const events = [];
  for await (const event of replicate.stream(model, { input: { prompt: process.argv[3] } })) {
    events.push({ event: event.event, data: event.data, id: event.id });
  }
  return { events };
}

async function upload() {
  const bytes = new Uint8Array(Buffer.from(process.argv[3], "base64"));
  const file = new Blob([bytes], { type: "application/octet-stream" });
  const output = await replicate.run(model, { input: { prompt: "checked", file } });
  return { output };
}

// run(): the output as the app gets it; a FileOutput is shown as {file: its URL, bytes}.
async function run() {
  const shown = async (value) => {
    if (value && typeof value.url === "function" && typeof value.blob === "function") {
      return { file: String(value.url()), text: await (await value.blob()).text() };
    }
    if (Array.isArray(value)) return Promise.all(value.map(shown));
    return value;
  };
  const output = await replicate.run(model, { input: JSON.parse(process.argv[3]) });
  return { output: await shown(output) };
}

const scenarios = { stream, upload, run };
const result = await scenarios[process.argv[2]]();
console.log(JSON.stringify({ ...result, calls }));
