import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { FEED_FORMATS, type FeedFormat } from '#lib/domain/catalogue/feed-formats.ts';
import { isImportNote } from '#lib/domain/catalogue/normalise.ts';
import { escapeHidden, hasLoneSurrogate } from '#lib/domain/validation.ts';
import { redactUrl, redactUrls } from '#lib/log.ts';

/** One feed import: where the file came from and how far processing got (the resume checkpoint). */
export type ImportStatus = 'queued' | 'running' | 'succeeded' | 'failed';

/**
 * How much an import problem mattered: `error`, the row was not imported (it is counted in `failed`);
 * `warning`, the product was imported without something (an additional image, a metadata field) or the
 * import left something as it was (products a full import did not remove).
 */
export const IMPORT_PROBLEM_SEVERITIES = ['error', 'warning'] as const;
export type ImportProblemSeverity = (typeof IMPORT_PROBLEM_SEVERITIES)[number];

/** A row that was not imported, an image that could not be used, or a note about an imported product. */
export interface ImportRowError {
  /** 1-based position of the product in the feed (CSV/TSV: data rows, header excluded); null for file-level problems. */
  row: number | null;
  productId?: string;
  message: string;
  /** Absent on entries stored before it was recorded: `severityOf` tells it from the message. */
  severity?: ImportProblemSeverity;
}

/** A problem as an import records it now: with its severity. */
export type RecordedImportProblem = ImportRowError & { severity: ImportProblemSeverity };

/**
 * An import problem's severity; for an entry stored without one, told from its text: the notes an import
 * gave (metadata left out, products kept) and an additional image's problem were warnings.
 */
export function severityOf(problem: ImportRowError): ImportProblemSeverity {
  if (problem.severity) return problem.severity;
  return problem.row === null ||
    // (An image that could not be fetched or decoded, not a row refused for its link: "… is not a URL.")
    /^additional_image_link https?:\/\//.test(problem.message) ||
    isImportNote(problem.message)
    ? 'warning'
    : 'error';
}

export interface ImportRecord {
  feedId: string;
  importId: string;
  status: ImportStatus;
  /** full: products absent from the file are removed; incremental: only upserts. */
  mode: 'full' | 'incremental';
  /**
   * The feed URL as given, credentials included: every run of the import (a resumed one too) fetches the
   * file, and resolves the file's relative links, with it. importView shows it redacted.
   */
  source: { kind: 'url'; url: string } | { kind: 'inline' };
  /** Format given by the caller, or sniffed from the file's first bytes once it is stored. */
  format?: FeedFormat;
  /** Key of the feed file in the object store. */
  objectKey: string;
  /** Rows in the file (known once the file has been read through). */
  total: number;
  /** Rows handled so far (each ends up embedded, updated, skipped or failed). */
  processed: number;
  /** New products, or products whose images changed: images fetched and embedded. */
  embedded: number;
  /** Content changed, images did not: stored vectors reused with the new filter fields, nothing fetched. */
  updated: number;
  /** Unchanged (same update_hash and embedding model): nothing written but the seen mark. */
  skipped: number;
  failed: number;
  /** Products removed because a full import no longer lists them. */
  removed: number;
  /** The first MAX_IMPORT_ERRORS problems; `failed` counts every failed row. */
  errors: ImportRowError[];
  /** Every row up to this one is done: a resumed import starts after it. */
  checkpointRow: number;
  /** Why the import as a whole failed. */
  message?: string;
  /**
   * Runs of this import since it last reached a checkpoint (internal): one that keeps failing at the same
   * place, with the same infrastructure error every time, ends as failed instead of running forever.
   */
  attempts?: number;
  /**
   * The createdAt of the feed the import was started for (internal): an import of a feed deleted and
   * created again under the same id does not run into the new one.
   */
  feedCreatedAt?: string;
  createdAt: string;
  updatedAt: string;
  startedAt?: string;
  finishedAt?: string;
}

export const MAX_IMPORT_ERRORS = 100;

/**
 * How long the feed's lease lasts without being renewed. One actor at a time holds it: an import runner
 * (renewing at every progress save) or the feed's deletion; a crashed holder's lease expires after this.
 */
export const FEED_LEASE_MS = 10 * 60_000;

/** Thrown by the fetcher when a feed file or an image cannot be fetched; the message goes into import errors. */
export class FetchError extends Error {
  override name = 'FetchError';
}

/** Import ids sort by creation time (base-36 milliseconds), then random. */
export function newImportId(now: Date): string {
  return `imp_${now.getTime().toString(36).padStart(9, '0')}_${randomBytes(5).toString('hex')}`;
}

/** Object-store key of an import's feed file, and of the marker object whose creation starts the worker in AWS. */
export function importObjectKeys(feedId: string, importId: string): { file: string; request: string } {
  const prefix = `imports/${feedId}/${importId}`;
  return { file: `${prefix}/feed`, request: `${prefix}/request.json` };
}

/**
 * The job id, in place of an import id, of a trigger asking the import runner to finish a feed's deletion
 * (one a DELETE request could not finish in its time). Import ids start with `imp_`, so it names none.
 */
export const FEED_DELETION_JOB = 'deletion';

/** Parses the worker's trigger object key back to its import (or FEED_DELETION_JOB). */
export function importOfRequestKey(key: string): { feedId: string; importId: string } | undefined {
  const match = /^imports\/([^/]+)\/([^/]+)\/request\.json$/.exec(
    decodeURIComponent(key.replace(/\+/g, ' ')),
  );
  return match ? { feedId: match[1]!, importId: match[2]! } : undefined;
}

/** A feed's import status, as its admin answers show it (DESIGN §2): its newest import. */
export interface LastImport {
  importId: string;
  status: ImportStatus;
  mode: ImportRecord['mode'];
  createdAt: string;
  finishedAt?: string;
}

/** The newest import's status, or null for a feed that has had none. */
export function lastImportOf(newest: ImportRecord | undefined): LastImport | null {
  if (!newest) return null;
  const { importId, status, mode, createdAt, finishedAt } = newest;
  return { importId, status, mode, createdAt, ...(finishedAt ? { finishedAt } : {}) };
}

/** The admin API's view of an import. */
export function importView(record: ImportRecord) {
  const {
    objectKey: _objectKey,
    checkpointRow: _checkpoint,
    attempts: _attempts,
    feedCreatedAt: _feedCreatedAt,
    ...view
  } = record;
  // By row, file-level notes (row null) after them: a chunk's image errors are recorded as its fetches
  // end, so row 2's could come before row 1's. Messages quote the feed's values (a metadata name, a
  // price, a URL): shown with their hidden characters escaped, as error bodies show a request's, and
  // their links redacted (the import records its image links so; a row refused for its link, or an
  // import stored before that, quotes the link as written).
  const shown = (text: string) => escapeHidden(redactUrls(text));
  const errors = [...record.errors]
    .sort((a, b) => (a.row ?? Infinity) - (b.row ?? Infinity))
    .map((problem) => ({
      ...problem,
      message: shown(problem.message),
      severity: severityOf(problem),
    }));
  const message = view.message === undefined ? {} : { message: shown(view.message) };
  // A feed URL's userinfo and signed query parameters are credentials of the shop's server: not shown.
  const source =
    view.source.kind === 'url' ? { kind: 'url' as const, url: redactUrl(view.source.url) } : view.source;
  // (`updated` was not counted by imports stored before it existed.)
  return { ...view, source, ...message, updated: view.updated ?? 0, errors };
}

export const StartImportRequest = z
  .strictObject({
    url: z
      .url({ protocol: /^https?$/, error: 'must be an http or https URL' })
      .max(2048)
      .refine((url) => !hasLoneSurrogate(url), 'a lone surrogate is not part of a URL')
      .optional()
      .describe('A feed file to fetch (http or https).'),
    format: z
      .enum(FEED_FORMATS)
      .optional()
      .describe('xml (Merchant Center RSS/Atom), csv, tsv, json (array) or jsonl.'),
    content: z
      .string()
      .min(1)
      // A lone surrogate (a JSON escape such as "\ud800" in the request) is no text a file can hold: stored
      // as UTF-8 it became U+FFFD, so two ids differing only there became one, the second a duplicate.
      .refine(
        (content) => !hasLoneSurrogate(content),
        'is not valid Unicode text: it has a lone UTF-16 surrogate (a JSON escape such as "\\ud800")',
      )
      .optional()
      .describe('The feed file itself (inline import); requires format.'),
    mode: z
      .enum(['full', 'incremental'])
      .default('full')
      .describe('full removes products the file no longer lists.'),
  })
  .refine((value) => (value.url === undefined) !== (value.content === undefined), {
    message: 'send either url or content',
    path: ['url'],
  })
  .refine((value) => value.content === undefined || value.format !== undefined, {
    message: 'format is required with inline content',
    path: ['format'],
  });
export type StartImportRequest = z.infer<typeof StartImportRequest>;

/**
 * A page size in a query string: digits only (`limit=`, `0x2` or `2e0` are no page size; a coerced
 * Number() read them as 0 and 2), then the range.
 */
const pageSize = (max: number, fallback: number) =>
  z
    .string()
    .regex(/^\d+$/, 'expected a whole number')
    .default(String(fallback))
    .transform(Number)
    .pipe(z.number().int().min(1).max(max))
    .describe(`Page size, 1 to ${max}; default ${fallback}.`);

export const ListImportsQuery = z.strictObject({
  limit: pageSize(100, 20),
  cursor: z.string().max(200).optional(),
});

export const ProductsPageQuery = z.strictObject({
  limit: pageSize(200, 50),
  cursor: z.string().max(2000).optional(),
});
