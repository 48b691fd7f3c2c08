import { createHash } from 'node:crypto';

/**
 * Structured JSON logging: one object per line with ids, counts and timings. Never log image bytes,
 * vectors, request bodies or secrets: a search id is logged as `sid-<hash>` (redactSearchId), never
 * itself, in a field or in a path (redactPath); a URL that may carry credentials by its host only, and
 * any URL a line's texts quote (an error's message, its stack) redacted (redactUrls).
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
    // Every text in the line with its URLs redacted: an error's message may quote a feed's or an image's
    // link, credentials included.
    const line = JSON.stringify(
      lineOf({ level: at, time: new Date().toISOString(), message }, base, fields),
      (_key, value: unknown) => (typeof value === 'string' ? redactUrls(value) : value),
    );
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
 * A line's own keys, then its fields (the logger's, then the call's): a field named like one of the
 * line's own keys is written with a `field_` prefix rather than over it, so that a line's message, level
 * and time are always what the code logged (an import's failure reason in a `message` field replaced
 * "import finished", and the lines searched for by it missed the failures).
 */
function lineOf(
  own: { level: string; time: string; message: string },
  ...fields: (Record<string, unknown> | undefined)[]
): Record<string, unknown> {
  // Own keys only (`in` saw constructor, toString… on the prototype); fromEntries, as a spread did, keeps
  // a `__proto__` field a field rather than setting the line's prototype.
  const renamed = fields.flatMap((source) =>
    Object.entries(source ?? {}).map(([key, value]) => [
      Object.hasOwn(own, key) ? `field_${key}` : key,
      value,
    ]),
  );
  return Object.fromEntries([...Object.entries(own), ...renamed]) as Record<string, unknown>;
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

/**
 * Query (and fragment) parameter names whose values are credentials, compared lower-cased without `-`,
 * `_`, `.` and spaces: API keys and tokens, presigned S3/GCS URLs (X-Amz-*, X-Goog-*, AWSAccessKeyId,
 * GoogleAccessId, Signature), Azure SAS (`sig`), CloudFront signed URLs (Signature, Policy, Key-Pair-Id).
 */
const SECRET_PARAMS = new Set([
  'auth',
  'authorization',
  'googleaccessid',
  'jwt',
  'key',
  'keypairid',
  'pass',
  'passwd',
  'policy',
  'pwd',
  'sig',
  'sessionid',
]);
/** …and names ending so (access_token, X-Amz-Security-Token, X-Goog-Credential, client_secret, api_key). */
const SECRET_SUFFIXES = [
  'token',
  'secret',
  'signature',
  'password',
  'credential',
  'apikey',
  'accesskey',
  'accesskeyid',
  'privatekey',
  'secretkey',
  'signingkey',
];

function isSecretParam(name: string): boolean {
  let decoded = name;
  try {
    decoded = decodeURIComponent(name.replace(/\+/g, ' '));
  } catch {
    // A malformed escape: the name as written.
  }
  const key = decoded.toLowerCase().replace(/[-_.\s]/g, '');
  return SECRET_PARAMS.has(key) || SECRET_SUFFIXES.some((suffix) => key.endsWith(suffix));
}

/** `a=1&token=x` → `a=1&token=***`: every credential's value (each time it repeats), the rest as is. */
function redactParams(params: string): string {
  return params
    .split('&')
    .map((part) => {
      const eq = part.indexOf('=');
      return eq > 0 && isSecretParam(part.slice(0, eq)) ? `${part.slice(0, eq)}=***` : part;
    })
    .join('&');
}

/**
 * An import's URL (its feed's, an image's) as the admin API shows it and logs write it: its userinfo
 * (`user:pass@`) as `***@` and the values of credential parameters (SECRET_PARAMS) as `***`. Everything
 * else is kept as written, not normalised, so a shop still recognises which of its links it is. Text that
 * is not an absolute URL is returned as it is.
 */
export function redactUrl(url: string): string {
  // (Up to the first `/`, `\`, `?` or `#` after the scheme is the authority, as WHATWG URLs read it.)
  const parts = /^([a-z][a-z\d+.-]*:\/\/)([^/\\?#]*)([^?#]*)(\?[^#]*)?(#[^]*)?$/i.exec(url);
  if (!parts) return url;
  const [, scheme, authority = '', path, query, fragment] = parts;
  // (The last `@` ends the userinfo: a password may hold an unescaped one.)
  const at = authority.lastIndexOf('@');
  const host = at > 0 ? `***@${authority.slice(at + 1)}` : authority;
  return `${scheme}${host}${path}${query ? `?${redactParams(query.slice(1))}` : ''}${
    // (A fragment is not sent, but an OAuth redirect puts its access_token there.)
    fragment ? `#${redactParams(fragment.slice(1))}` : ''
  }`;
}

/**
 * `text` with every http(s) URL in it redacted (redactUrl): messages that quote a link, such as
 * "image_link https://cdn.example/a.jpg?X-Amz-Signature=…: HTTP 404.". A URL ends at whitespace or a quote;
 * punctuation right after it (the ":" before the reason, a closing ")") is not taken as part of it.
 */
export function redactUrls(text: string): string {
  // Most texts quote no link: every log line's strings pass through here.
  if (!text.includes('://')) return text;
  return text.replace(/https?:\/\/[^\s"'<>`]+/gi, (found) => {
    // The trailing punctuation, walked back from the end: linear, where a lazy regex backtracked
    // quadratically on a long run of dots (http:// + 16,000 dots + a: 124 ms for one line, now 0.4 ms).
    let end = found.length;
    while (end > 0 && TRAILING_PUNCTUATION.has(found[end - 1]!)) end -= 1;
    return `${redactUrl(found.slice(0, end))}${found.slice(end)}`;
  });
}

const TRAILING_PUNCTUATION = new Set(['.', ',', ':', ';', '!', '?', ')', ']', '}']);
