/**
 * One read of Unleash's client API (`GET <api>/client/features`), the way a node reads its flags, with
 * every answer sorted into what the node should do about it. The node polls this itself, rather than
 * leaving the polling to unleash-client: on a 401 or 403 unleash-client 6 stops polling for good ("Stopping
 * refresh of toggles"), so a node started before its token existed would never pick it up.
 */
import type { ClientFeaturesResponse } from 'unleash-client';

export type ClientApiOutcome =
  | { kind: 'features'; response: ClientFeaturesResponse; etag: string | undefined }
  | { kind: 'unchanged' }
  /** 401/403: the token is missing, wrong, expired or of the wrong type. */
  | { kind: 'unauthorized'; message: string }
  /** No HTTP answer at all (refused, reset, timed out). */
  | { kind: 'unreachable'; message: string }
  /** An HTTP answer that is not usable (404 from a wrong URL, 5xx, a body that is not a feature list). */
  | { kind: 'error'; message: string };

export interface ClientApiRequest {
  apiRoot: string;
  token: string | undefined;
  appName: string;
  instanceId: string;
  etag: string | undefined;
  timeoutMs: number;
  signal?: AbortSignal;
}

export async function fetchClientFeatures(request: ClientApiRequest): Promise<ClientApiOutcome> {
  const url = `${request.apiRoot}/client/features`;
  const headers: Record<string, string> = {
    accept: 'application/json',
    'unleash-appname': request.appName,
    'unleash-instanceid': request.instanceId,
  };
  if (request.token) headers.authorization = request.token;
  if (request.etag) headers['if-none-match'] = request.etag;
  const signals = [AbortSignal.timeout(request.timeoutMs), ...(request.signal ? [request.signal] : [])];
  let response: Response;
  try {
    response = await fetch(url, { headers, signal: AbortSignal.any(signals) });
  } catch (error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    const why = cause?.code ?? cause?.message ?? (error as Error).message;
    return { kind: 'unreachable', message: `Unleash unreachable at ${url}: ${why}` };
  }
  if (response.status === 304) return { kind: 'unchanged' };
  if (response.status === 401 || response.status === 403) {
    await response.body?.cancel();
    const token = request.token ? 'is not valid there' : 'is not set';
    return {
      kind: 'unauthorized',
      message: `unauthorized: Unleash answered ${response.status} to GET ${url} (the node's UNLEASH_API_TOKEN ${token}: it must be a backend token of the Unleash environment this node reads); retrying`,
    };
  }
  const text = await response.text();
  if (!response.ok)
    return {
      kind: 'error',
      message: `Unleash answered ${response.status} to GET ${url}: ${text.slice(0, 200)}`,
    };
  const problem = featureListProblem(text);
  if (typeof problem === 'string')
    return { kind: 'error', message: `Unleash's answer to GET ${url} is not a feature list: ${problem}` };
  return { kind: 'features', response: problem, etag: response.headers.get('etag') ?? undefined };
}

/** The parsed answer, or what is wrong with it (a wrong answer must change nothing). */
function featureListProblem(text: string): ClientFeaturesResponse | string {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return `not JSON (${JSON.stringify(text.slice(0, 80))})`;
  }
  const features = (body as { features?: unknown })?.features;
  if (!Array.isArray(features)) return 'no "features" array';
  for (const feature of features) {
    const { name, enabled, strategies } = (feature ?? {}) as Record<string, unknown>;
    if (typeof name !== 'string' || typeof enabled !== 'boolean' || !Array.isArray(strategies))
      return `a feature without name, enabled and strategies: ${JSON.stringify(feature).slice(0, 120)}`;
  }
  const segments = (body as { segments?: unknown }).segments;
  if (segments !== undefined && !Array.isArray(segments)) return '"segments" is not an array';
  return body as ClientFeaturesResponse;
}
