/**
 * One instant query against a Prometheus HTTP API (`GET /api/v1/query`): the values of a vector or a
 * scalar, or why there are none (unreachable, an HTTP error, a PromQL error, a range vector).
 */
import type { QueryAnswer } from './decide.js';

/** How long one query may take before the measurement is an error. */
export const QUERY_TIMEOUT_MS = 5000;

interface ApiAnswer {
  status: string;
  error?: string;
  data?: { resultType: string; result: unknown };
}

export async function queryPrometheus(address: string, query: string): Promise<QueryAnswer> {
  let body: ApiAnswer;
  try {
    const url = `${address.replace(/\/$/, '')}/api/v1/query?query=${encodeURIComponent(query)}`;
    const response = await fetch(url, { signal: AbortSignal.timeout(QUERY_TIMEOUT_MS) });
    const text = await response.text();
    try {
      body = JSON.parse(text) as ApiAnswer;
    } catch {
      return { error: `Prometheus answered ${response.status}: ${text.slice(0, 200)}` };
    }
  } catch (error) {
    return { error: `Prometheus at ${address} unreachable: ${(error as Error).message}` };
  }
  if (body.status !== 'success') return { error: `PromQL: ${body.error ?? body.status}` };
  const data = body.data;
  if (data?.resultType === 'scalar') return { values: [Number((data.result as [number, string])[1])] };
  if (data?.resultType === 'vector') {
    const samples = data.result as Array<{ value: [number, string] }>;
    return { values: samples.map((sample) => Number(sample.value[1])) };
  }
  return { error: `the query gives a ${data?.resultType ?? 'missing'} result, not a vector or a scalar` };
}
