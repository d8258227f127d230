// A task's lifecycle through a TypeScript client generated from the served
// document: types by openapi-typescript, calls by openapi-fetch. tsc checks
// it strictly against the generated types before it runs, so a document
// that drifts from what a client needs fails to compile or to run.
//
//   scripts/tsclient.sh BASE_URL ADMIN_EMAIL ADMIN_PASSWORD
import createClient from "openapi-fetch";
import type { paths } from "./schema";

declare const process: { argv: string[]; exit(code: number): never }; // node's, without @types/node

const [base, adminEmail, adminPassword] = process.argv.slice(2);

function check(ok: unknown, what: string, detail?: unknown): asserts ok {
  if (!ok) {
    throw new Error(`${what}${detail === undefined ? "" : ": " + JSON.stringify(detail)}`);
  }
}

async function login(email: string, password: string) {
  const anon = createClient<paths>({ baseUrl: base });
  const { data, error } = await anon.POST("/api/v1/auth/login", { body: { email, password } });
  check(data, "login " + email, error);
  return createClient<paths>({ baseUrl: base, headers: { Authorization: `Bearer ${data.data.token}` } });
}

async function main() {
  const admin = await login(adminEmail, adminPassword);

  const type = await admin.POST("/api/v1/admin/workers/task-types", {
    body: { name: "ts_report", max_retries: 1, param_schema: { type: "object", required: ["days"] } },
  });
  check(type.data, "create a task type", type.error);
  const worker = await admin.POST("/api/v1/admin/workers", {
    body: { email: "ts-bot@example.com", password: "worker-password", full_name: "TS Bot" },
  });
  check(worker.data, "create a worker", worker.error);

  // A 400 comes back typed, with the field at fault.
  const bad = await admin.POST("/api/v1/admin/workers/tasks", {
    body: { title: "no params", task_type_id: type.data.data.id },
  });
  check(bad.response.status === 400 && bad.error?.error.code === "validation_failed", "a task without params is refused", bad.error);
  check(bad.error.error.field === "params", "the 400 names params", bad.error);

  const created = await admin.POST("/api/v1/admin/workers/tasks", {
    body: { title: "Weekly report", task_type_id: type.data.data.id, params: { days: 7 }, priority: "high" },
  });
  check(created.data, "create a task", created.error);
  const taskID = created.data.data.id;

  const bot = await login("ts-bot@example.com", "worker-password");
  const hb = await bot.POST("/api/v1/worker/heartbeat", { body: { status: "idle" } });
  check(hb.data?.data.online, "heartbeat", hb.error);

  const claim = await bot.POST("/api/v1/worker/tasks/claim", {});
  check(claim.data?.data, "claim", claim.error);
  const task = claim.data.data;
  check(task.id === taskID && task.status === "in_progress" && task.task_type?.name === "ts_report", "the claimed task", task);
  check(task.failure_kind === null, "a nullable enum reads as null", task.failure_kind);

  const empty = await bot.POST("/api/v1/worker/tasks/claim", {});
  check(empty.response.status === 200 && empty.data?.data === null, "an empty claim is data null", empty.data);

  const update = await bot.POST("/api/v1/worker/tasks/{id}/updates", {
    params: { path: { id: taskID } },
    body: { message: "reading the logs" },
  });
  check(update.data, "post an update", update.error);

  const content = '{"post":1}\n{"post":2}\n';
  const upload = await bot.POST("/api/v1/worker/tasks/{id}/data", {
    params: { path: { id: taskID }, query: { data_type: "posts", filename: "nvda.jsonl" } },
    // The raw body, as application/octet-stream (the document's media type).
    body: content as unknown as string,
    bodySerializer: (body: unknown) => body as string,
    headers: { "Content-Type": "application/octet-stream" },
  });
  check(upload.data, "upload data", upload.error);
  const stored = upload.data.data[0];
  check(stored.size_bytes === content.length, "the stored size", stored);

  const download = await bot.GET("/api/v1/worker/tasks/{id}/data/{data_id}", {
    params: { path: { id: taskID, data_id: stored.id } },
    parseAs: "text",
  });
  check(download.data === content, "download what was uploaded", download.data);

  const result = await bot.POST("/api/v1/worker/tasks/{id}/result", {
    params: { path: { id: taskID } },
    body: { result: { pages: 3 } },
  });
  check(result.data, "post a result", result.error);
  const done = await bot.PUT("/api/v1/worker/tasks/{id}/status", {
    params: { path: { id: taskID } },
    body: { status: "completed" },
  });
  check(done.data?.data.status === "completed", "complete", done.error);

  const again = await bot.PUT("/api/v1/worker/tasks/{id}/status", {
    params: { path: { id: taskID } },
    body: { status: "completed" },
  });
  check(again.response.status === 409, "completing twice is a conflict", again.error);

  const got = await admin.GET("/api/v1/admin/workers/tasks/{id}", { params: { path: { id: taskID } } });
  check(got.data, "read the task", got.error);
  console.log("typescript lifecycle: ok");
}

main().catch((err) => {
  console.error("typescript lifecycle:", err instanceof Error ? err.message : err);
  process.exit(1);
});
