import type { APIGatewayProxyResult } from 'aws-lambda';

export type Headers = Record<string, string>;

/** A JSON response in API Gateway's proxy-integration shape. */
export function json(statusCode: number, body: unknown, headers: Headers = {}): APIGatewayProxyResult {
  return {
    statusCode,
    headers: { 'Content-Type': 'application/json; charset=utf-8', ...headers },
    body: JSON.stringify(body),
  };
}

export const ok = (body: unknown, headers?: Headers) => json(200, body, headers);
export const created = (body: unknown, headers?: Headers) => json(201, body, headers);
export const accepted = (body: unknown, headers?: Headers) => json(202, body, headers);
/** A proxy result's headers as strings (API Gateway allows numbers and booleans there). */
export function stringHeaders(headers: APIGatewayProxyResult['headers']): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers ?? {})) out[name] = String(value);
  return out;
}

export const noContent = (): APIGatewayProxyResult => ({ statusCode: 204, headers: {}, body: '' });
