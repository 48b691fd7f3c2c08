import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { DetectRequest, RelatedRequest, RootSearchRequest, SearchImageRequest } from '#lib/domain/schemas.ts';
import type { ErrorCode } from '#lib/domain/errors.ts';
import { STATUS_OF } from '#lib/http/errors.ts';
import { buildOpenApiDocument, EXAMPLE_IMAGE } from '#lib/http/openapi.ts';
import { ROUTES } from '#lib/http/routes.ts';

type Json = Record<string, unknown>;

const doc = buildOpenApiDocument() as {
  openapi: string;
  paths: Record<string, Record<string, Json>>;
  components: { schemas: Record<string, Json> };
};

/** The schema each public handler validates its body with (functions/*.ts call parseInput with it). */
const PUBLIC_BODY: Record<string, z.ZodType> = {
  SearchImage: SearchImageRequest,
  Detect: DetectRequest,
  Related: RelatedRequest,
  RootSearch: RootSearchRequest,
};

function resolveRef(schema: Json): Json {
  const ref = schema.$ref;
  if (typeof ref !== 'string') return schema;
  const name = /^#\/components\/schemas\/(\w+)$/.exec(ref)?.[1];
  expect(name, `unexpected $ref ${ref}`).toBeDefined();
  const target = doc.components.schemas[name!];
  expect(target, `missing component ${name}`).toBeDefined();
  return target!;
}

describe('OpenAPI document', () => {
  it('is OpenAPI 3.1', () => {
    expect(doc.openapi).toBe('3.1.0');
  });

  it('lists every route of ROUTES with its method', () => {
    for (const route of ROUTES) {
      const item = doc.paths[route.path];
      expect(item, `${route.path} missing`).toBeDefined();
      expect(item![route.method.toLowerCase()], `${route.method} ${route.path} missing`).toBeDefined();
    }
    const documented = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.keys(item).map((method) => `${method.toUpperCase()} ${path}`),
    );
    // Each GET route answers HEAD too (its headers, no body), and the document says so.
    const served = ROUTES.flatMap((route) => [
      `${route.method} ${route.path}`,
      ...(route.method === 'GET' ? [`HEAD ${route.path}`] : []),
    ]);
    expect(documented.sort()).toEqual(served.sort());
    for (const route of ROUTES.filter((r) => r.method === 'GET')) {
      const head = doc.paths[route.path]!.head as { responses: Record<string, { content?: unknown }> };
      expect(Object.values(head.responses).every((response) => response.content === undefined)).toBe(true);
    }
  });

  it("gives each public route's request body the JSON Schema of the zod schema its handler validates with", () => {
    const publicRoutes = ROUTES.filter((route) => route.access === 'public');
    expect(publicRoutes.map((route) => route.name).sort()).toEqual(Object.keys(PUBLIC_BODY).sort());
    for (const route of publicRoutes) {
      const op = doc.paths[route.path]![route.method.toLowerCase()] as {
        requestBody?: { content: Record<string, { schema: Json }> };
      };
      const media = op.requestBody?.content['application/json'];
      expect(media, `${route.name} has no JSON request body`).toBeDefined();
      const { $schema: _dialect, ...expected } = z.toJSONSchema(PUBLIC_BODY[route.name]!, {
        io: 'input',
        target: 'draft-2020-12',
      }) as Json;
      expect(resolveRef(media!.schema), route.name).toEqual(expected);
    }
  });

  it('types the body search id of every public request as the middleware reads it: a string or a number', () => {
    // (Only the detect request said so; `"searchId": 12345` is read, and answered 401, on every endpoint.)
    const idField: Record<string, string> = {
      SearchImage: 'searchId',
      Detect: 'searchId',
      Related: 'searchId',
      RootSearch: 'feedId',
    };
    const typesOf = (schema: Json): string[] => [
      ...(Array.isArray(schema.type) ? schema.type : schema.type ? [schema.type] : []),
      ...((schema.anyOf as Json[] | undefined) ?? []).flatMap(typesOf),
    ];
    for (const [name, field] of Object.entries(idField)) {
      const op = doc.paths[ROUTES.find((route) => route.name === name)!.path]!.post as {
        requestBody: { content: Record<string, { schema: Json }> };
      };
      const body = resolveRef(op.requestBody.content['application/json']!.schema);
      const id = (body.properties as Record<string, Json>)[field]!;
      expect(typesOf(id).sort(), name).toEqual(['null', 'number', 'string']);
      expect(
        PUBLIC_BODY[name]!.safeParse({ imageData: EXAMPLE_IMAGE, productId: 'p', [field]: 12345 }).success,
      ).toBe(true);
    }
  });

  it('has the error schema, and every error code appears in some response example', () => {
    const error = doc.components.schemas.Error as { properties?: Record<string, unknown> } | undefined;
    expect(error?.properties).toHaveProperty('error');
    expect(error?.properties).toHaveProperty('requestId');

    const seen = new Set<string>();
    for (const item of Object.values(doc.paths)) {
      for (const op of Object.values(item) as {
        responses: Record<
          string,
          {
            content?: Record<
              string,
              {
                schema?: Json;
                examples?: Record<string, { value: { error: { code: string; status: number } } }>;
              }
            >;
          }
        >;
      }[]) {
        for (const [status, response] of Object.entries(op.responses)) {
          for (const example of Object.values(response.content?.['application/json']?.examples ?? {})) {
            const { code, status: bodyStatus } = example.value.error;
            expect(STATUS_OF[code as ErrorCode]).toBe(Number(status));
            expect(bodyStatus).toBe(Number(status));
            seen.add(code);
          }
        }
      }
    }
    // not_found and method_not_allowed are answered by the router for any path, so no single operation lists them.
    const routerOnly = new Set(['not_found', 'method_not_allowed']);
    const missing = Object.keys(STATUS_OF).filter((code) => !seen.has(code) && !routerOnly.has(code));
    expect(missing).toEqual([]);
  });
});
