import { createHash } from 'node:crypto';

/**
 * Structured JSON logging: one object per line with ids, counts and timings. Never log image bytes,
 * vectors, request bodies or secrets: a search id is logged as `sid-<hash>` (redactSearchId), never
 * itself, in a field or in a path (redactPath); a URL that may carry credentials by its host only.
 */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';
const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

export interface Logger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
}

export function createLogger(level: LogLevel, base: Record<string, unknown> = {}): Logger {
  const threshold = ORDER[level];
  const write = (at: Exclude<LogLevel, 'silent'>, message: string, fields?: Record<string, unknown>) => {
    if (ORDER[at] < threshold) return;
    const line = JSON.stringify({ level: at, time: new Date().toISOString(), message, ...base, ...fields });
    if (at === 'error' || at === 'warn') process.stderr.write(`${line}\n`);
    else process.stdout.write(`${line}\n`);
  };
  return {
    debug: (m, f) => write('debug', m, f),
    info: (m, f) => write('info', m, f),
    warn: (m, f) => write('warn', m, f),
    error: (m, f) => write('error', m, f),
    child: (fields) => createLogger(level, { ...base, ...fields }),
  };
}

/**
 * A search id is a bearer credential: logs name it by `sid-` and the first 16 hex digits of its SHA-256,
 * stable and not reversible. The search-id authorizer gives the gateway the same as its principalId, so
 * the functions' lines and the gateway's records of one key join. (Its first characters, logged before,
 * were `vps_` and two more: nothing to tell keys apart by.)
 */
export function redactSearchId(searchId: string): string {
  return `sid-${createHash('sha256').update(searchId).digest('hex').slice(0, 16)}`;
}

/** Search ids are made as `vps_` and 32 base64url characters (lib/domain/keys.ts). */
const SEARCH_ID_SEGMENT = /^vps_[A-Za-z0-9_-]+$/;

/**
 * A request path fit for a log line: its query dropped, and each segment that is a search id (the
 * `searchId` path parameter of `DELETE /admin/v1/keys/{searchId}`, or anything shaped like one) replaced
 * by redactSearchId's name for it.
 */
export function redactPath(path: string, searchIds: (string | undefined)[] = []): string {
  const secrets = new Set(searchIds.filter((id): id is string => Boolean(id)));
  return (path.split('?')[0] ?? '')
    .split('/')
    .map((segment) => {
      let decoded = segment;
      try {
        decoded = decodeURIComponent(segment);
      } catch {
        // A malformed escape: compared as sent.
      }
      return secrets.has(decoded) || SEARCH_ID_SEGMENT.test(decoded) ? redactSearchId(decoded) : segment;
    })
    .join('/');
}

/**
 * The fields of an error line: `error` (`Name: message`), its stack, the cause's `Name: message`, and for
 * an AWS SDK error the service's request id and HTTP status (`$metadata`), by which AWS support finds the
 * call. Nothing of the request that failed (no body, no headers).
 */
export function errorFields(error: unknown): Record<string, unknown> {
  if (!(error instanceof Error)) return { error: String(error) };
  const fields: Record<string, unknown> = { error: `${error.name}: ${error.message}` };
  if (error.stack) fields.stack = error.stack;
  if (error.cause instanceof Error) fields.cause = `${error.cause.name}: ${error.cause.message}`;
  const metadata = (error as { $metadata?: { requestId?: unknown; httpStatusCode?: unknown } }).$metadata;
  if (typeof metadata?.requestId === 'string') fields.awsErrorRequestId = metadata.requestId;
  if (typeof metadata?.httpStatusCode === 'number') fields.awsErrorStatus = metadata.httpStatusCode;
  return fields;
}
