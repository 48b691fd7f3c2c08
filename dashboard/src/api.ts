/** The admin and search API as the dashboard calls it: same origin, JSON in and out. */

const TOKEN_KEY = 'vps.adminToken';

export function adminToken(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setAdminToken(token: string | null): void {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** A non-2xx answer in the service's error shape (DESIGN §3), or a network failure (status 0). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly requestId: string | undefined,
    readonly details: { path: string; message: string }[] = [],
  ) {
    super(message);
  }

  /** The endpoint is not deployed on this server yet (no route) or its dependency is down. */
  get notAvailable(): boolean {
    return this.code === 'not_found' || this.code === 'method_not_allowed' || this.status === 503;
  }
}

export interface RateLimit {
  limit: number;
  remaining: number;
  reset: number;
}

export interface ApiResult<T> {
  body: T;
  requestId: string | undefined;
  rateLimit?: RateLimit;
  /** The resource's version (a feed's), for a later change's If-Match. */
  etag?: string;
}

type Listener = () => void;
const unauthorisedListeners: Listener[] = [];
/** Called when the admin token is refused, so the app can return to the sign-in page. */
export function onUnauthorised(listener: Listener): void {
  unauthorisedListeners.push(listener);
}

async function call<T>(
  method: string,
  path: string,
  options: { body?: unknown; bearer?: string | null; idempotencyKey?: string; ifMatch?: string } = {},
): Promise<ApiResult<T>> {
  const headers: Record<string, string> = { Accept: 'application/json' };
  if (options.body !== undefined) headers['Content-Type'] = 'application/json';
  if (options.bearer) headers.Authorization = `Bearer ${options.bearer}`;
  if (options.idempotencyKey) headers['Idempotency-Key'] = options.idempotencyKey;
  if (options.ifMatch) headers['If-Match'] = options.ifMatch;
  let response: Response;
  let text: string;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
    });
    // Inside: a connection cut after the status line fails here, and the answer is as lost as with none.
    text = await response.text();
  } catch (error) {
    throw new ApiError(
      0,
      'network_error',
      `The server did not answer (${error instanceof Error ? error.message : 'network error'}).`,
      undefined,
    );
  }
  const requestId = response.headers.get('X-Request-Id') ?? undefined;
  let parsed: unknown;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  if (!response.ok) {
    const error =
      (parsed as
        | {
            error?: { code?: string; message?: string; details?: { path: string; message: string }[] };
            requestId?: string;
          }
        | undefined) ?? {};
    throw new ApiError(
      response.status,
      error.error?.code ?? `http_${response.status}`,
      error.error?.message ?? `The server answered ${response.status} ${response.statusText}.`,
      error.requestId ?? requestId,
      error.error?.details ?? [],
    );
  }
  const limit = response.headers.get('RateLimit-Limit');
  const rateLimit = limit
    ? {
        limit: Number(limit),
        remaining: Number(response.headers.get('RateLimit-Remaining')),
        reset: Number(response.headers.get('RateLimit-Reset')),
      }
    : undefined;
  return { body: parsed as T, requestId, rateLimit, etag: response.headers.get('ETag') ?? undefined };
}

/** Tries of an admin create whose answer was lost on the way (network error), a second apart. */
const LOST_ANSWER_TRIES = 3;
const CREATE_RETRY_MS = 1000;
/**
 * How long a create is asked again while its first try still runs (409 idempotency_key_in_use): past the
 * server's 60-s hold of a key by a request that stopped, so the page ends with the one thing made (or
 * the first try's error) instead of an error after which a second click would make another.
 */
const IN_PROGRESS_WAIT_MS = 65_000;

/**
 * Admin API call with the signed-in token; a refused token signs the user out. A create (POST) carries an
 * Idempotency-Key and is sent again with it when its answer was lost, so a dropped connection neither
 * shows an error for a feed that was made nor makes a second one (docs/api.md "Retries").
 */
export async function admin<T>(method: string, path: string, body?: unknown): Promise<T> {
  return (await adminResult<T>(method, path, body)).body;
}

/** As admin, with the answer's headers (a feed's ETag); `ifMatch` sends one back with a change. */
export async function adminResult<T>(
  method: string,
  path: string,
  body?: unknown,
  options: { ifMatch?: string } = {},
): Promise<ApiResult<T>> {
  const idempotencyKey = method === 'POST' ? crypto.randomUUID() : undefined;
  const started = Date.now();
  let lostAnswers = 0;
  try {
    for (;;) {
      try {
        return await call<T>(method, `/admin/v1${path}`, {
          body,
          bearer: adminToken(),
          idempotencyKey,
          ifMatch: options.ifMatch,
        });
      } catch (error) {
        if (!idempotencyKey || !(error instanceof ApiError)) throw error;
        if (error.code === 'network_error') {
          lostAnswers += 1;
          if (lostAnswers >= LOST_ANSWER_TRIES) throw error;
        } else if (error.code !== 'idempotency_key_in_use' || Date.now() - started > IN_PROGRESS_WAIT_MS)
          throw error;
        await new Promise((resolve) => setTimeout(resolve, CREATE_RETRY_MS));
      }
    }
  } catch (error) {
    if (error instanceof ApiError && error.code === 'unauthorized') {
      setAdminToken(null);
      for (const listener of unauthorisedListeners) listener();
    }
    throw error;
  }
}

/** Checks a token without storing it. */
export async function checkToken(token: string): Promise<void> {
  await call('GET', '/admin/v1/feeds', { bearer: token });
}

/** Public API call authenticated with a search id. */
export function search<T>(path: string, searchId: string, body: unknown): Promise<ApiResult<T>> {
  return call<T>('POST', `/api/v1${path}`, { body, bearer: searchId });
}

// ---- Shapes the dashboard reads ----

export interface Feed {
  feedId: string;
  name: string;
  plan: 'free' | 'pro' | 'enterprise';
  hourlyLimit: number;
  /** Whether hourlyLimit is the feed's own (enterprise) rather than its plan's default. */
  customHourlyLimit: boolean;
  domains: string[];
  requireOrigin: boolean;
  createdAt: string;
  updatedAt: string;
  /** Its newest import; null before the first. */
  lastImport: {
    importId: string;
    status: string;
    mode: string;
    createdAt: string;
    finishedAt?: string;
  } | null;
}

export interface SearchKey {
  searchId: string;
  feedId: string;
  name: string;
  createdAt: string;
  lastUsedAt?: string;
  revokedAt?: string;
}

export interface UsageTotals {
  requests: number;
  ok: number;
  clientErrors: number;
  serverErrors: number;
  rateLimited: number;
}

export interface UsageReport {
  feedId: string;
  from: string;
  to: string;
  days: ({ day: string; endpoint: string } & UsageTotals)[];
  keys: ({ searchId: string } & UsageTotals)[];
  /** Related-products requests per context (absent from an older server). */
  contexts?: { type: string; domain: string; requests: number }[];
  totals: UsageTotals;
}

export interface ImportStatus {
  importId?: string;
  status: 'queued' | 'running' | 'succeeded' | 'failed';
  total?: number;
  processed?: number;
  embedded?: number;
  /** Content changed, images not: re-filed without fetching them. */
  updated?: number;
  skipped?: number;
  failed?: number;
  removed?: number;
  /** Why the import as a whole failed. */
  message?: string;
  /** The first 100 problems, by row. */
  errors?: ImportProblem[];
  createdAt?: string;
  mode?: 'full' | 'incremental';
}

/** A row not imported (error), or a product imported without something (warning). */
export interface ImportProblem {
  /** Null for a note about the file as a whole. */
  row: number | null;
  productId?: string;
  message: string;
  severity: 'error' | 'warning';
}

export interface Product {
  id?: string;
  product_id?: string;
  item_group_id?: string;
  title?: string;
  image_link?: string;
  link?: string;
  price?: number | string;
  sale_price?: number | string;
  currency?: string;
  score?: number;
  brand?: string;
  variant_count?: number;
}

export interface DetectedObject {
  box: [number, number, number, number];
  label: string;
  score: number;
}

export interface DetectResponse {
  action: string;
  searchId: string;
  results: { objects: DetectedObject[] };
  processTimeSeconds: number;
}
