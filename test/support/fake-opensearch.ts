import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A real HTTP server speaking the subset of the OpenSearch REST API that the vector and visual-word index
 * adapters use: index exists/get/create (knn mapping; text fields with the whitespace analyzer and a custom
 * BM25 similarity), `_bulk`, `_search` (knn with efficient filter, ids, bool with `match`, sort by score
 * and a keyword), `_msearch` of such searches, `_count`, `_delete_by_query`, `_refresh`. It computes exact
 * k-NN itself and returns the k-NN plugin's documented scores, so the adapter's score → similarity mapping
 * is tested against the formula, not against itself; likewise it scores `match` with Lucene's BM25 (see
 * `bm25Scorer`) over its single index, which stands for one shard.
 *
 * It is deliberately stricter than OpenSearch where a lenient answer would hide an adapter bug: unknown
 * body keys, queries on unmapped fields, vectors of the wrong dimension, documents without routing in a
 * routing-required index and fields outside a strict mapping all fail with OpenSearch's error shape.
 * Documents become searchable only after a refresh (`refresh=true|wait_for` or `_refresh`), like the real
 * near-real-time search.
 */
export interface FakeOpenSearch {
  url: string;
  /** Every request received, for assertions on what the adapter sent. */
  requests: Array<{
    method: string;
    path: string;
    query: URLSearchParams;
    headers: IncomingMessage['headers'];
    body: unknown;
    /** The HTTP status answered (callers may swallow errors: tests can still see them here). */
    status?: number;
  }>;
  close(): Promise<void>;
}

interface StoredDocument {
  id: string;
  routing: string | undefined;
  source: Record<string, unknown>;
}

interface KnnMapping {
  field: string;
  dimension: number;
  spaceType: 'innerproduct' | 'cosinesimil' | 'l2';
}

/** BM25 parameters of a similarity (Lucene's BM25Similarity). */
interface Bm25 {
  k1: number;
  b: number;
}

interface TextMapping {
  similarity: Bm25;
  /** `docs` indexes no frequencies: every matching term has freq 1. */
  frequencies: boolean;
}

interface FakeIndex {
  name: string;
  routingRequired: boolean;
  strict: boolean;
  keywordFields: Set<string>;
  textFields: Map<string, TextMapping>;
  knn: KnnMapping | undefined;
  /** Searchable documents (as of the last refresh) and the live ones. */
  visible: Map<string, StoredDocument>;
  live: Map<string, StoredDocument>;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    reason: string,
  ) {
    super(reason);
  }
}

function fail(type: string, reason: string, status = 400): never {
  throw new HttpError(status, type, reason);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function onlyKeys(value: Record<string, unknown>, allowed: string[], where: string): void {
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key)) fail('parsing_exception', `[${where}] unknown field [${key}]`);
  }
}

/** One `{ field: value }` pair, as in term/terms/knn clauses. */
function singleEntry(value: unknown, where: string): [string, unknown] {
  if (!isObject(value) || Object.keys(value).length !== 1) {
    fail('parsing_exception', `[${where}] query malformed, must have exactly one field`);
  }
  return Object.entries(value)[0] as [string, unknown];
}

/** The k-NN plugin's score translation (OpenSearch "Spaces"). */
function knnScore(space: KnnMapping['spaceType'], query: number[], vector: number[]): number {
  let dot = 0;
  let qq = 0;
  let vv = 0;
  let l2 = 0;
  for (let i = 0; i < query.length; i += 1) {
    const a = query[i] ?? 0;
    const b = vector[i] ?? 0;
    dot += a * b;
    qq += a * a;
    vv += b * b;
    l2 += (a - b) * (a - b);
  }
  let score: number;
  if (space === 'innerproduct') score = dot > 0 ? dot + 1 : 1 / (1 - dot);
  else if (space === 'cosinesimil') score = (2 - (1 - dot / Math.sqrt(qq * vv))) / 2;
  else score = 1 / (1 + l2);
  // Scores are Java floats.
  return Math.fround(score);
}

/** Score of a matching document (0 in filter context), undefined when it does not match. */
type Scorer = (document: StoredDocument) => number | undefined;

/** A text field's value analysed (whitespace analyzer): token count and frequency per term. */
interface Analysed {
  length: number;
  frequencies: Map<string, number>;
}

/** Memoised per stored document (documents are immutable: an upsert stores a new one). */
const analysedCache = new WeakMap<StoredDocument, Map<string, Analysed>>();

function analysed(document: StoredDocument, field: string): Analysed {
  let fields = analysedCache.get(document);
  if (!fields) analysedCache.set(document, (fields = new Map()));
  let cached = fields.get(field);
  if (!cached) {
    const value = document.source[field];
    const values = Array.isArray(value) ? value.map(String) : value === undefined ? [] : [String(value)];
    const tokens = values.flatMap((text) => text.split(/\s+/).filter(Boolean));
    const frequencies = new Map<string, number>();
    for (const token of tokens) frequencies.set(token, (frequencies.get(token) ?? 0) + 1);
    cached = { length: tokens.length, frequencies };
    fields.set(field, cached);
  }
  return cached;
}

/**
 * A `match` query (operator or) on a text field as Lucene scores it: one SHOULD term clause per query
 * token, each scoring BM25 = idf · freq / (freq + k1 · (1 − b + b · dl / avgdl)) (Lucene ≥ 8 drops the
 * (k1 + 1) factor), idf = ln(1 + (N − df + 0.5) / (df + 0.5)), with N = the searchable documents that have
 * the field and df = those containing the term, both over the whole index (the shard), whatever the filters.
 * Length norms are the token counts (the fake ignores `norms: false`; with k1 = 0 they are never read).
 */
function bm25Scorer(index: FakeIndex, field: string, mapping: TextMapping, queryTokens: string[]): Scorer {
  const withField = [...index.visible.values()]
    .map((document) => analysed(document, field))
    .filter((value) => value.length > 0);
  const n = withField.length;
  const avgdl = n === 0 ? 1 : withField.reduce((sum, value) => sum + value.length, 0) / n;
  const df = new Map<string, number>();
  for (const token of new Set(queryTokens)) {
    df.set(token, withField.filter((value) => value.frequencies.has(token)).length);
  }
  const { k1, b } = mapping.similarity;
  return (document) => {
    const value = analysed(document, field);
    let score = 0;
    let matched = false;
    for (const token of queryTokens) {
      const count = value.frequencies.get(token) ?? 0;
      if (count === 0) continue;
      matched = true;
      const freq = mapping.frequencies ? count : 1;
      const documentFrequency = df.get(token) ?? 0;
      const idf = Math.log(1 + (n - documentFrequency + 0.5) / (documentFrequency + 0.5));
      score += (idf * freq) / (freq + k1 * (1 - b + (b * value.length) / avgdl));
    }
    return matched ? score : undefined;
  };
}

function keywordValues(document: StoredDocument, field: string): string[] {
  const value = document.source[field];
  if (Array.isArray(value)) return value.map(String);
  return value === undefined || value === null ? [] : [String(value)];
}

/** Compiles a query; `scoring` is false in filter context (filter, must_not, knn filter, delete/count). */
function compileQuery(index: FakeIndex, query: unknown, where = 'query', scoring = true): Scorer {
  const [type, body] = singleEntry(query, where);
  // Term-level queries score a constant 1 when scoring: the adapters only rank by `match` and knn.
  const constant = scoring ? 1 : 0;
  const keywordField = (field: string): void => {
    if (!index.keywordFields.has(field))
      fail('query_shard_exception', `[${type}] field [${field}] is not a mapped keyword`);
  };
  switch (type) {
    case 'match_all':
      if (!isObject(body) || Object.keys(body).length > 0)
        fail('parsing_exception', '[match_all] takes no fields');
      return () => constant;
    case 'term': {
      const [field, raw] = singleEntry(body, 'term');
      keywordField(field);
      const value = isObject(raw) ? raw.value : raw;
      if (typeof value !== 'string') fail('parsing_exception', `[term] value of [${field}] must be a string`);
      return (document) => (keywordValues(document, field).includes(value) ? constant : undefined);
    }
    case 'terms': {
      const [field, values] = singleEntry(body, 'terms');
      keywordField(field);
      if (!Array.isArray(values) || values.some((value) => typeof value !== 'string')) {
        fail('parsing_exception', `[terms] values of [${field}] must be an array of strings`);
      }
      const wanted = new Set(values as string[]);
      return (document) =>
        keywordValues(document, field).some((value) => wanted.has(value)) ? constant : undefined;
    }
    case 'ids': {
      if (!isObject(body)) fail('parsing_exception', '[ids] malformed');
      onlyKeys(body, ['values'], 'ids');
      if (!Array.isArray(body.values)) fail('parsing_exception', '[ids] values must be an array');
      const ids = new Set(body.values as string[]);
      return (document) => (ids.has(document.id) ? constant : undefined);
    }
    case 'match': {
      const [field, raw] = singleEntry(body, 'match');
      const mapping = index.textFields.get(field);
      if (!mapping) fail('query_shard_exception', `[match] field [${field}] is not a mapped text field`);
      const clause = isObject(raw) ? raw : { query: raw };
      onlyKeys(clause, ['query', 'operator'], `match.${field}`);
      if (typeof clause.query !== 'string')
        fail('parsing_exception', `[match] query of [${field}] must be a string`);
      if (clause.operator !== undefined && String(clause.operator).toLowerCase() !== 'or')
        fail('parsing_exception', '[match] the fake supports operator or only');
      const queryTokens = clause.query.split(/\s+/).filter(Boolean);
      if (queryTokens.length === 0) return () => undefined;
      const score = bm25Scorer(index, field, mapping, queryTokens);
      return scoring ? score : (document) => (score(document) === undefined ? undefined : 0);
    }
    case 'bool': {
      if (!isObject(body)) fail('parsing_exception', '[bool] malformed');
      onlyKeys(body, ['filter', 'must', 'must_not', 'should', 'minimum_should_match'], 'bool');
      const clauses = (key: string, clauseScoring: boolean): Scorer[] => {
        const value = body[key];
        if (value === undefined) return [];
        return (Array.isArray(value) ? value : [value]).map((clause) =>
          compileQuery(index, clause, `bool.${key}`, clauseScoring),
        );
      };
      const required = [...clauses('filter', false), ...clauses('must', scoring)];
      const excluded = clauses('must_not', false);
      const optional = clauses('should', scoring);
      const minimumShould =
        typeof body.minimum_should_match === 'number'
          ? body.minimum_should_match
          : required.length > 0
            ? 0
            : 1;
      return (document) => {
        let score = 0;
        for (const clause of required) {
          const clauseScore = clause(document);
          if (clauseScore === undefined) return undefined;
          score += clauseScore;
        }
        if (excluded.some((clause) => clause(document) !== undefined)) return undefined;
        let matchedShould = 0;
        for (const clause of optional) {
          const clauseScore = clause(document);
          if (clauseScore === undefined) continue;
          matchedShould += 1;
          score += clauseScore;
        }
        if (optional.length > 0 && matchedShould < minimumShould) return undefined;
        return score;
      };
    }
    default:
      return fail('parsing_exception', `unknown query [${type}]`);
  }
}

/**
 * Leaf clauses of a query as Lucene ≥ 9 counts them against `indices.query.bool.max_clause_count`
 * (IndexSearcher: every leaf of the rewritten tree, nested or not): a `match` (operator or) rewrites to one
 * term clause per token, a `terms` query is one clause.
 */
function leafClauses(query: unknown): number {
  if (!isObject(query)) return 1;
  const [type, body] = Object.entries(query)[0] ?? ['', undefined];
  if (type === 'bool' && isObject(body)) {
    return ['filter', 'must', 'must_not', 'should']
      .flatMap((key) => (body[key] === undefined ? [] : Array.isArray(body[key]) ? body[key] : [body[key]]))
      .reduce((sum: number, clause) => sum + leafClauses(clause), 0);
  }
  if (type === 'match' && isObject(body)) {
    const clause = Object.values(body)[0];
    const text = isObject(clause) ? clause.query : clause;
    return typeof text === 'string' ? text.split(/\s+/).filter(Boolean).length : 1;
  }
  return 1;
}

interface SortKey {
  field: string;
  descending: boolean;
}

/** `sort`: `_score` or keyword fields, as names or `{ field: order | { order } }`. */
function parseSort(index: FakeIndex, spec: unknown): SortKey[] | undefined {
  if (spec === undefined) return undefined;
  const entries = Array.isArray(spec) ? spec : [spec];
  return entries.map((entry) => {
    const [field, raw] = typeof entry === 'string' ? [entry, undefined] : singleEntry(entry, 'sort');
    const order = isObject(raw) ? (onlyKeys(raw, ['order'], `sort.${field}`), raw.order) : raw;
    if (order !== undefined && order !== 'asc' && order !== 'desc')
      fail('parsing_exception', `[sort] unknown order [${String(order)}] of [${field}]`);
    if (field !== '_score' && !index.keywordFields.has(field))
      fail('illegal_argument_exception', `No mapping found for [${field}] in order to sort on`);
    return { field, descending: (order ?? (field === '_score' ? 'desc' : 'asc')) === 'desc' };
  });
}

function sortValue(key: SortKey, document: StoredDocument, score: number): number | string | null {
  return key.field === '_score' ? score : (keywordValues(document, key.field)[0] ?? null);
}

function compareBySort(
  sort: SortKey[],
  a: { document: StoredDocument; score: number },
  b: { document: StoredDocument; score: number },
): number {
  for (const key of sort) {
    const x = sortValue(key, a.document, a.score);
    const y = sortValue(key, b.document, b.score);
    if (x === y) continue;
    // Missing values sort last (OpenSearch's default `missing: _last`) in either order.
    if (x === null) return 1;
    if (y === null) return -1;
    const order = x < y ? -1 : 1;
    return key.descending ? -order : order;
  }
  return 0;
}

function projectSource(source: Record<string, unknown>, spec: unknown): Record<string, unknown> | undefined {
  if (spec === undefined || spec === true) return source;
  if (spec === false) return undefined;
  if (Array.isArray(spec))
    return Object.fromEntries(Object.entries(source).filter(([key]) => spec.includes(key)));
  return fail('parsing_exception', '[_source] must be a boolean or an array of field names');
}

function validIndexName(name: string): boolean {
  return (
    name.length > 0 && name === name.toLowerCase() && !/[\\/*?"<>|,#:\s]/.test(name) && !name.startsWith('_')
  );
}

export interface FakeOpenSearchOptions {
  /** `indices.query.bool.max_clause_count` of the fake cluster (default 1024, OpenSearch's default). */
  maxClauseCount?: number;
}

/** BM25 as OpenSearch defaults it (and the `BM25` built-in similarity name). */
const DEFAULT_BM25: Bm25 = { k1: 1.2, b: 0.75 };

/** Index similarity settings: `{ name: { type: 'BM25', k1, b } }`; only BM25 is supported. */
function parseSimilarities(value: unknown): Map<string, Bm25> {
  const similarities = new Map<string, Bm25>([['BM25', DEFAULT_BM25]]);
  if (value === undefined) return similarities;
  if (!isObject(value)) fail('settings_exception', 'index.similarity must be an object');
  for (const [name, definition] of Object.entries(value)) {
    if (!isObject(definition)) fail('settings_exception', `similarity [${name}] malformed`);
    onlyKeys(definition, ['type', 'k1', 'b', 'discount_overlaps'], `index.similarity.${name}`);
    if (definition.type !== 'BM25')
      fail(
        'illegal_argument_exception',
        `the fake supports similarity type BM25, not [${String(definition.type)}]`,
      );
    // Lucene's BM25Similarity: k1 finite and ≥ 0, b in [0, 1]; OpenSearch also accepts numeric strings.
    const k1 = Number(definition.k1 ?? DEFAULT_BM25.k1);
    const b = Number(definition.b ?? DEFAULT_BM25.b);
    if (!Number.isFinite(k1) || k1 < 0)
      fail('illegal_argument_exception', `illegal k1 value: ${String(definition.k1)}`);
    if (!Number.isFinite(b) || b < 0 || b > 1)
      fail('illegal_argument_exception', `illegal b value: ${String(definition.b)}, must be between 0 and 1`);
    similarities.set(name, { k1, b });
  }
  return similarities;
}

/** Starts the fake on 127.0.0.1 with an ephemeral port. */
export async function startFakeOpenSearch(options: FakeOpenSearchOptions = {}): Promise<FakeOpenSearch> {
  const maxClauseCount = options.maxClauseCount ?? 1024;
  const indices = new Map<string, FakeIndex>();
  const requests: FakeOpenSearch['requests'] = [];

  const getIndex = (name: string): FakeIndex =>
    indices.get(name) ?? fail('index_not_found_exception', `no such index [${name}]`, 404);

  const refreshIf = (index: FakeIndex, query: URLSearchParams): void => {
    const refresh = query.get('refresh');
    if (refresh === null || refresh === 'false') return;
    if (!['', 'true', 'wait_for'].includes(refresh))
      fail('illegal_argument_exception', `bad refresh [${refresh}]`);
    index.visible = new Map(index.live);
  };

  const createIndex = (name: string, body: unknown): unknown => {
    if (!validIndexName(name)) fail('invalid_index_name_exception', `Invalid index name [${name}]`);
    if (indices.has(name)) fail('resource_already_exists_exception', `index [${name}] already exists`);
    if (!isObject(body)) fail('parsing_exception', 'index body must be an object');
    onlyKeys(body, ['settings', 'mappings'], 'create index');
    const settings = isObject(body.settings) ? body.settings : {};
    onlyKeys(settings, ['index'], 'settings');
    const indexSettings = isObject(settings.index) ? settings.index : {};
    onlyKeys(
      indexSettings,
      ['knn', 'number_of_shards', 'number_of_replicas', 'similarity'],
      'settings.index',
    );
    const similarities = parseSimilarities(indexSettings.similarity);
    const mappings = body.mappings;
    if (!isObject(mappings) || !isObject(mappings.properties))
      fail('mapper_parsing_exception', 'mappings.properties required');
    onlyKeys(mappings, ['dynamic', 'properties', '_routing', '_source'], 'mappings');
    if (mappings._source !== undefined) {
      if (!isObject(mappings._source)) fail('mapper_parsing_exception', '[_source] malformed');
      onlyKeys(mappings._source, ['enabled', 'includes', 'excludes'], '_source');
    }
    const keywordFields = new Set<string>();
    const textFields = new Map<string, TextMapping>();
    let knn: KnnMapping | undefined;
    for (const [field, definition] of Object.entries(mappings.properties)) {
      if (!isObject(definition)) fail('mapper_parsing_exception', `field [${field}] malformed`);
      if (definition.type === 'keyword') {
        keywordFields.add(field);
      } else if (definition.type === 'text') {
        onlyKeys(definition, ['type', 'analyzer', 'similarity', 'index_options', 'norms'], field);
        if ((definition.analyzer ?? 'whitespace') !== 'whitespace')
          fail('mapper_parsing_exception', `[${field}] the fake supports the whitespace analyzer only`);
        const similarity = similarities.get(String(definition.similarity ?? 'BM25'));
        if (!similarity)
          fail(
            'mapper_parsing_exception',
            `Unknown Similarity type [${String(definition.similarity)}] for field [${field}]`,
          );
        const indexOptions = definition.index_options ?? 'positions';
        if (!['docs', 'freqs', 'positions', 'offsets'].includes(String(indexOptions)))
          fail('mapper_parsing_exception', `[${field}] unknown index_options [${String(indexOptions)}]`);
        if (definition.norms !== undefined && typeof definition.norms !== 'boolean')
          fail('mapper_parsing_exception', `[${field}] norms must be a boolean`);
        textFields.set(field, { similarity, frequencies: indexOptions !== 'docs' });
      } else if (definition.type === 'knn_vector') {
        if (indexSettings.knn !== true)
          fail('illegal_argument_exception', 'knn_vector fields need index.knn: true');
        if (knn) fail('mapper_parsing_exception', 'the fake supports one knn_vector field');
        onlyKeys(definition, ['type', 'dimension', 'method', 'space_type'], field);
        const method = definition.method;
        if (!Number.isInteger(definition.dimension) || (definition.dimension as number) <= 0) {
          fail('mapper_parsing_exception', `[${field}] dimension must be a positive integer`);
        }
        if (!isObject(method)) fail('mapper_parsing_exception', `[${field}] method required`);
        onlyKeys(method, ['name', 'engine', 'space_type', 'parameters'], `${field}.method`);
        if (method.name !== 'hnsw') fail('mapper_parsing_exception', `[${field}] method must be hnsw`);
        if (method.engine !== 'faiss' && method.engine !== 'lucene') {
          fail('mapper_parsing_exception', `[${field}] engine must be faiss or lucene`);
        }
        const space = method.space_type;
        if (space !== 'innerproduct' && space !== 'cosinesimil' && space !== 'l2') {
          fail('mapper_parsing_exception', `[${field}] unsupported space_type [${String(space)}]`);
        }
        const parameters = isObject(method.parameters) ? method.parameters : {};
        onlyKeys(parameters, ['m', 'ef_construction', 'ef_search'], `${field}.method.parameters`);
        knn = { field, dimension: definition.dimension as number, spaceType: space };
      } else {
        fail('mapper_parsing_exception', `the fake does not support field type [${String(definition.type)}]`);
      }
    }
    const routing = isObject(mappings._routing) ? mappings._routing : {};
    indices.set(name, {
      name,
      routingRequired: routing.required === true,
      strict: mappings.dynamic === 'strict',
      keywordFields,
      textFields,
      knn,
      visible: new Map(),
      live: new Map(),
    });
    return { acknowledged: true, shards_acknowledged: true, index: name };
  };

  const indexDocument = (
    index: FakeIndex,
    id: string,
    routing: string | undefined,
    source: unknown,
  ): void => {
    if (index.routingRequired && !routing)
      fail('routing_missing_exception', `routing is required for [${index.name}]/[${id}]`);
    if (!isObject(source)) fail('mapper_parsing_exception', 'document must be an object');
    for (const [field, value] of Object.entries(source)) {
      if (index.knn && field === index.knn.field) {
        if (
          !Array.isArray(value) ||
          value.length !== index.knn.dimension ||
          value.some((x) => typeof x !== 'number')
        ) {
          fail('mapper_parsing_exception', `Vector dimension mismatch. Expected: ${index.knn.dimension}`);
        }
      } else if (index.textFields.has(field)) {
        const values = Array.isArray(value) ? value : [value];
        if (values.some((x) => typeof x !== 'string'))
          fail('mapper_parsing_exception', `[${field}] must hold strings`);
      } else if (index.keywordFields.has(field)) {
        const values = Array.isArray(value) ? value : [value];
        if (values.some((x) => typeof x !== 'string'))
          fail('mapper_parsing_exception', `[${field}] must hold strings`);
      } else if (index.strict) {
        fail(
          'strict_dynamic_mapping_exception',
          `mapping set to strict, dynamic introduction of [${field}] is not allowed`,
        );
      }
    }
    index.live.set(id, { id, routing, source });
  };

  const bulk = (pathIndex: string | undefined, raw: string, query: URLSearchParams): unknown => {
    const lines = raw.split('\n').filter((line) => line.trim() !== '');
    const items: unknown[] = [];
    const touched = new Set<FakeIndex>();
    for (let i = 0; i < lines.length; i += 1) {
      const action = JSON.parse(lines[i] as string) as unknown;
      const [op, meta] = singleEntry(action, 'bulk action');
      if (op !== 'index' && op !== 'delete')
        fail('illegal_argument_exception', `the fake does not support bulk [${op}]`);
      if (!isObject(meta)) fail('illegal_argument_exception', 'bulk action metadata malformed');
      onlyKeys(meta, ['_index', '_id', 'routing'], `bulk ${op}`);
      const indexName = (meta._index as string | undefined) ?? pathIndex;
      const id = meta._id;
      if (typeof indexName !== 'string' || typeof id !== 'string')
        fail('action_request_validation_exception', 'index and id are required');
      const routing = meta.routing as string | undefined;
      const sourceLine = op === 'index' ? lines[(i += 1)] : undefined;
      if (op === 'index' && sourceLine === undefined)
        fail('illegal_argument_exception', 'bulk index action without a source line');
      try {
        const index = getIndex(indexName);
        touched.add(index);
        if (op === 'index') {
          indexDocument(index, id, routing, JSON.parse(sourceLine as string));
          items.push({ index: { _index: indexName, _id: id, status: 201, result: 'created' } });
        } else {
          const existed = index.live.delete(id);
          items.push({ delete: { _index: indexName, _id: id, status: existed ? 200 : 404 } });
        }
      } catch (error) {
        if (!(error instanceof HttpError)) throw error;
        items.push({
          [op]: {
            _index: indexName,
            _id: id,
            status: error.status,
            error: { type: error.type, reason: error.message },
          },
        });
      }
    }
    for (const index of touched) refreshIf(index, query);
    const errors = items.some((item) => Object.values(item as Record<string, { error?: unknown }>)[0]?.error);
    return { took: 1, errors, items };
  };

  const search = (index: FakeIndex, body: unknown, query: URLSearchParams): unknown => {
    const request = isObject(body) ? body : {};
    onlyKeys(request, ['size', 'query', '_source', 'sort', 'track_total_hits'], 'search');
    if (request.track_total_hits !== undefined && typeof request.track_total_hits !== 'boolean')
      fail('parsing_exception', '[track_total_hits] the fake supports booleans only');
    for (const key of query.keys()) {
      if (!['routing'].includes(key))
        fail('illegal_argument_exception', `request contains unrecognized parameter [${key}]`);
    }
    const size = request.size ?? 10;
    if (!Number.isInteger(size) || (size as number) < 0 || (size as number) > 10_000) {
      fail('illegal_argument_exception', '[size] must be an integer in [0, 10000]');
    }
    const documents = [...index.visible.values()];
    let hits: Array<{ document: StoredDocument; score: number }>;
    const [type, knnBody] =
      request.query === undefined ? ['match_all', {}] : singleEntry(request.query, 'query');
    const sort = parseSort(index, request.sort);
    if (type === 'knn') {
      if (sort) fail('illegal_argument_exception', 'the fake does not sort knn queries');
      const [field, clause] = singleEntry(knnBody, 'knn');
      if (!index.knn || field !== index.knn.field)
        fail('query_shard_exception', `[knn] field [${field}] is not a knn_vector`);
      if (!isObject(clause)) fail('parsing_exception', '[knn] malformed');
      onlyKeys(clause, ['vector', 'k', 'filter'], 'knn');
      const vector = clause.vector;
      if (
        !Array.isArray(vector) ||
        vector.length !== index.knn.dimension ||
        vector.some((x) => typeof x !== 'number')
      ) {
        fail(
          'illegal_argument_exception',
          `[knn] query vector has wrong dimension, expected ${index.knn.dimension}`,
        );
      }
      const k = clause.k;
      if (!Number.isInteger(k) || (k as number) < 1 || (k as number) > 10_000) {
        fail('illegal_argument_exception', '[knn] requires k in [1, 10000]');
      }
      const matches =
        clause.filter === undefined ? () => 0 : compileQuery(index, clause.filter, 'knn.filter', false);
      const knn = index.knn;
      hits = documents
        .filter((document) => matches(document) !== undefined)
        .map((document) => ({
          document,
          score: knnScore(knn.spaceType, vector as number[], document.source[knn.field] as number[]),
        }))
        .sort((a, b) => b.score - a.score)
        .slice(0, k as number);
    } else {
      const clauses = leafClauses(request.query);
      if (clauses > maxClauseCount) {
        fail(
          'search_phase_execution_exception',
          `all shards failed: too_many_clauses: maxClauseCount is set to ${maxClauseCount} (query has ${clauses})`,
        );
      }
      const scorer = compileQuery(index, request.query ?? { match_all: {} });
      hits = documents.flatMap((document) => {
        const score = scorer(document);
        // Scores are Java floats; unsorted queries rank by score, then index order (like Lucene's doc ids).
        return score === undefined ? [] : [{ document, score: Math.fround(score) }];
      });
      hits.sort((a, b) => b.score - a.score);
      if (sort) hits.sort((a, b) => compareBySort(sort, a, b));
    }
    const page = hits.slice(0, size as number);
    return {
      took: 1,
      timed_out: false,
      _shards: { total: 1, successful: 1, skipped: 0, failed: 0 },
      hits: {
        ...(request.track_total_hits === false ? {} : { total: { value: hits.length, relation: 'eq' } }),
        max_score: page[0]?.score ?? null,
        hits: page.map(({ document, score }) => {
          const source = projectSource(document.source, request._source);
          return {
            _index: index.name,
            _id: document.id,
            // Like OpenSearch, a field sort computes scores only when it sorts on _score.
            _score: !sort || sort.some((key) => key.field === '_score') ? score : null,
            ...(document.routing === undefined ? {} : { _routing: document.routing }),
            ...(source === undefined ? {} : { _source: source }),
            ...(sort ? { sort: sort.map((key) => sortValue(key, document, score)) } : {}),
          };
        }),
      },
    };
  };

  /**
   * `_msearch`: NDJSON pairs of a header (`index`, `routing`) and a `_search` body, each answered by `search`
   * (validation included). A failing search becomes an error entry with its status, like OpenSearch; an
   * unparsable line or a malformed header fails the whole request.
   */
  const msearch = (pathIndex: string | undefined, raw: string, query: URLSearchParams): unknown => {
    for (const key of query.keys())
      fail('illegal_argument_exception', `request contains unrecognized parameter [${key}]`);
    const lines = raw.split('\n').filter((line) => line.trim() !== '');
    if (lines.length === 0)
      fail('action_request_validation_exception', 'Validation Failed: 1: no requests added;');
    if (lines.length % 2 !== 0) fail('parse_exception', 'msearch: the last header has no search body');
    const responses: unknown[] = [];
    for (let i = 0; i < lines.length; i += 2) {
      const header = JSON.parse(lines[i] as string) as unknown;
      if (!isObject(header)) fail('parse_exception', 'msearch header must be an object');
      onlyKeys(header, ['index', 'routing'], 'msearch header');
      const indexName = header.index ?? pathIndex;
      if (typeof indexName !== 'string')
        fail('action_request_validation_exception', 'msearch: every search needs an index');
      if (header.routing !== undefined && typeof header.routing !== 'string')
        fail('parse_exception', 'msearch header routing must be a string');
      const body = JSON.parse(lines[i + 1] as string) as unknown;
      const params = new URLSearchParams(header.routing === undefined ? {} : { routing: header.routing });
      try {
        responses.push({ ...(search(getIndex(indexName), body, params) as object), status: 200 });
      } catch (error) {
        if (!(error instanceof HttpError)) throw error;
        responses.push({
          error: {
            root_cause: [{ type: error.type, reason: error.message }],
            type: error.type,
            reason: error.message,
          },
          status: error.status,
        });
      }
    }
    return { took: 1, responses };
  };

  const queryOnly = (
    index: FakeIndex,
    body: unknown,
    where: string,
    allowed: string[] = ['query'],
  ): ((document: StoredDocument) => boolean) => {
    if (!isObject(body)) fail('parsing_exception', `[${where}] body required`);
    onlyKeys(body, allowed, where);
    if (body.query === undefined) fail('action_request_validation_exception', `[${where}] query is missing`);
    const scorer = compileQuery(index, body.query, 'query', false);
    return (document) => scorer(document) !== undefined;
  };

  const route = (method: string, path: string, query: URLSearchParams, raw: string): [number, unknown] => {
    const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    const json = (): unknown => (raw.trim() === '' ? undefined : JSON.parse(raw));
    const [first, second] = parts;
    if (first === '_bulk' && method === 'POST') return [200, bulk(undefined, raw, query)];
    if (first === '_msearch' && (method === 'POST' || method === 'GET'))
      return [200, msearch(undefined, raw, query)];
    if (first === undefined) return [200, { version: { distribution: 'opensearch', number: 'fake' } }];
    if (parts.length === 1) {
      if (method === 'HEAD') return [indices.has(first) ? 200 : 404, undefined];
      if (method === 'GET') {
        // Index names or a trailing-wildcard pattern (which, like OpenSearch, matches nothing without 404).
        const names = first.endsWith('*')
          ? [...indices.keys()].filter((name) => name.startsWith(first.slice(0, -1)))
          : [getIndex(first) && first];
        return [
          200,
          Object.fromEntries(names.map((name) => [name, { aliases: {}, mappings: {}, settings: {} }])),
        ];
      }
      if (method === 'PUT') return [200, createIndex(first, json())];
      if (method === 'DELETE') {
        if (!indices.has(first) && query.get('ignore_unavailable') === 'true')
          return [200, { acknowledged: true }];
        getIndex(first);
        indices.delete(first);
        return [200, { acknowledged: true }];
      }
    }
    if (parts.length === 2 && second?.startsWith('_')) {
      // The client sends PUT when the path names the index; OpenSearch serves both.
      if (second === '_bulk' && (method === 'POST' || method === 'PUT'))
        return [200, bulk(first, raw, query)];
      // Before getIndex: a missing index fails each search in the response, not the request.
      if (second === '_msearch' && (method === 'POST' || method === 'GET'))
        return [200, msearch(first, raw, query)];
      const index = getIndex(first);
      if (second === '_search' && (method === 'POST' || method === 'GET'))
        return [200, search(index, json(), query)];
      if (second === '_count' && (method === 'POST' || method === 'GET')) {
        const matches = queryOnly(index, json(), '_count');
        return [
          200,
          { count: [...index.visible.values()].filter(matches).length, _shards: { total: 1, successful: 1 } },
        ];
      }
      if (second === '_delete_by_query' && method === 'POST') {
        for (const key of query.keys()) {
          if (!['routing', 'refresh', 'conflicts'].includes(key))
            fail('illegal_argument_exception', `unrecognized parameter [${key}]`);
        }
        const body = json();
        const matches = queryOnly(index, body, '_delete_by_query', ['query', 'max_docs']);
        const maxDocs = isObject(body) ? body.max_docs : undefined;
        if (
          maxDocs !== undefined &&
          (typeof maxDocs !== 'number' || !Number.isInteger(maxDocs) || maxDocs < 1)
        )
          fail('action_request_validation_exception', 'maxDocs should be greater than 0');
        // Like OpenSearch, delete_by_query works on a search snapshot: only visible documents are deleted
        // (at most max_docs of them).
        const doomed = [...index.visible.values()].filter(matches).slice(0, maxDocs ?? Infinity);
        for (const document of doomed) index.live.delete(document.id);
        refreshIf(index, query);
        return [
          200,
          { took: 1, timed_out: false, total: doomed.length, deleted: doomed.length, failures: [] },
        ];
      }
      if (second === '_refresh' && method === 'POST') {
        index.visible = new Map(index.live);
        return [200, { _shards: { total: 1, successful: 1, failed: 0 } }];
      }
    }
    return fail('illegal_argument_exception', `the fake does not serve ${method} ${path}`);
  };

  const handle = (request: IncomingMessage, response: ServerResponse): void => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const url = new URL(request.url ?? '/', 'http://fake');
      const raw = Buffer.concat(chunks).toString('utf8');
      const method = request.method ?? 'GET';
      let status: number;
      let payload: unknown;
      const recorded = requests.length;
      try {
        let body: unknown = raw;
        // NDJSON bodies (`_bulk`, `_msearch`) are recorded as they came.
        if (!/\/_(bulk|msearch)$/.test(url.pathname) && raw.trim() !== '') body = JSON.parse(raw);
        requests.push({
          method,
          path: url.pathname,
          query: url.searchParams,
          headers: request.headers,
          body,
        });
        [status, payload] = route(method, url.pathname, url.searchParams, raw);
      } catch (error) {
        const http =
          error instanceof HttpError ? error : new HttpError(400, 'parse_exception', String(error));
        status = http.status;
        payload = {
          error: {
            root_cause: [{ type: http.type, reason: http.message }],
            type: http.type,
            reason: http.message,
          },
          status: http.status,
        };
      }
      const entry = requests[recorded];
      if (entry) entry.status = status;
      const text = payload === undefined ? '' : JSON.stringify(payload);
      response.writeHead(status, {
        'content-type': 'application/json; charset=UTF-8',
        'content-length': Buffer.byteLength(text),
      });
      response.end(method === 'HEAD' ? undefined : text);
    });
  };

  const server: Server = createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((error) => (error ? reject(error) : resolve()));
      }),
  };
}
