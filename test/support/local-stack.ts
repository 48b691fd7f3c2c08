import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type LocalStack, startLocalStack } from '#lib/local/stack.ts';

export interface TestStack extends LocalStack {
  /** JSON request to the running server. */
  call(
    method: string,
    path: string,
    options?: { body?: unknown; headers?: Record<string, string>; raw?: string },
  ): Promise<TestResponse>;
  admin(method: string, path: string, body?: unknown): Promise<TestResponse>;
  stop(): Promise<void>;
}

export interface TestResponse {
  status: number;
  headers: Headers;
  // Tests read arbitrary JSON shapes; narrowing every access would only hide the assertions.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
}

/** Starts the real local server (embedded stores in a fresh temp folder, free port). */
export async function startTestStack(env: Record<string, string> = {}): Promise<TestStack> {
  const dataDir = await mkdtemp(join(tmpdir(), 'vps-test-'));
  const stack = await startLocalStack({
    ...process.env,
    LOG_LEVEL: 'silent',
    PORT: '0',
    DATA_DIR: dataDir,
    ...env,
  });
  const call: TestStack['call'] = async (method, path, options = {}) => {
    const headers: Record<string, string> = { ...(options.headers ?? {}) };
    let body: string | undefined = options.raw;
    if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers['content-type'] ??= 'application/json';
    }
    const response = await fetch(`${stack.url}${path}`, { method, headers, body });
    const text = await response.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      // Non-JSON bodies are returned as text for the assertion to show.
    }
    return { status: response.status, headers: response.headers, body: parsed };
  };
  return {
    ...stack,
    call,
    admin: (method, path, body) =>
      call(method, path, { body, headers: { authorization: `Bearer ${stack.adminToken}` } }),
    async stop() {
      await stack.close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/** A tiny real PNG, base64-encoded. */
export async function pngBase64(width = 32, height = 24, colour = '#3366cc'): Promise<string> {
  const { default: sharp } = await import('sharp');
  const png = await sharp({ create: { width, height, channels: 3, background: colour } })
    .png()
    .toBuffer();
  return png.toString('base64');
}
