/**
 * Throw-away TLS material for tests (issue 25): a self-signed certificate for 127.0.0.1, made with openssl
 * into a folder of the test's own. The certificate is its own CA, so a client given it as the CA trusts
 * the server, and a client given another such certificate does not.
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

export interface TestCertificate {
  certFile: string;
  keyFile: string;
  /** The same file as `certFile`: the certificate signs itself. */
  caFile: string;
}

/** A self-signed certificate and key for 127.0.0.1 named `name` in `dir`, valid for a day. */
export function selfSignedCertificate(dir: string, name: string): TestCertificate {
  const certFile = join(dir, `${name}.crt`);
  const keyFile = join(dir, `${name}.key`);
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-days',
      '1',
      '-subj',
      `/CN=${name}`,
      '-addext',
      'subjectAltName=IP:127.0.0.1',
      '-keyout',
      keyFile,
      '-out',
      certFile,
    ],
    { stdio: 'pipe' },
  );
  return { certFile, keyFile, caFile: certFile };
}
