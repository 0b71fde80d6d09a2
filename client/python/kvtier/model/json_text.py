# The JSON text nlohmann::json's dump(2) writes, reproduced byte for byte:
# the C++ decoder hashes ModelConfig::ToJson() into the model fingerprint (the
# root of every page key), so Python must print the same text. Doubles need
# nlohmann's Grisu2 (not always the shortest digits Python's repr gives), ported
# from nlohmann/detail/conversions/to_chars.hpp with ints standing in for uint64.
import json
import math
import struct

__all__ = ["dump_nlohmann", "nlohmann_double"]

_M64 = (1 << 64) - 1
_ALPHA, _GAMMA = -60, -32


def _normalize(f, e):
    while not f >> 63:
        f, e = f << 1, e - 1
    return f, e


def _mul(x, y):
    """diyfp::mul: the upper 64 bits of the 128-bit product, rounded (ties up)."""
    (xf, xe), (yf, ye) = x, y
    return ((xf * yf + (1 << 63)) >> 64) & _M64, xe + ye + 64


def _cached_power(e):
    """nlohmann's cached 10^-k for binary exponent e: the 64-bit significand of
    10^k rounded to nearest (the table in to_chars.hpp, computed)."""
    f = _ALPHA - e - 1
    q = abs(f * 78913) >> 18  # C++ int division truncates toward zero
    k = (q if f >= 0 else -q) + (1 if f > 0 else 0)
    index = (300 + k + 7) // 8
    dec = -300 + 8 * index
    # 10^dec as f * 2^be with f in [2^63, 2^64), rounded to nearest.
    if dec >= 0:
        num, den = 10 ** dec, 1
    else:
        num, den = 1, 10 ** (-dec)
    be = (num.bit_length() - den.bit_length()) - 64
    while True:
        scaled_num = num << -be if be < 0 else num
        scaled_den = den << be if be > 0 else den
        q, r = divmod(scaled_num, scaled_den)
        if q >> 64:
            be += 1
            continue
        if not q >> 63:
            be -= 1
            continue
        break
    if 2 * r >= scaled_den:
        q += 1
        if q >> 64:
            q, be = q >> 1, be + 1
    return q, be, dec


def _boundaries(value):
    bits = struct.unpack("<Q", struct.pack("<d", value))[0]
    E, F = bits >> 52, bits & ((1 << 52) - 1)
    v = (F, -1074) if E == 0 else (F + (1 << 52), E - 1075)
    closer = F == 0 and E > 1
    m_plus = (2 * v[0] + 1, v[1] - 1)
    m_minus = (4 * v[0] - 1, v[1] - 2) if closer else (2 * v[0] - 1, v[1] - 1)
    w_plus = _normalize(*m_plus)
    w_minus = (m_minus[0] << (m_minus[1] - w_plus[1]), w_plus[1])
    return w_minus, _normalize(*v), w_plus


def _round(buf, dist, delta, rest, ten_k):
    while (rest < dist and delta - rest >= ten_k and
           (rest + ten_k < dist or dist - rest > rest + ten_k - dist)):
        buf[-1] -= 1
        rest += ten_k


def _digit_gen(m_minus, w, m_plus):
    """grisu2_digit_gen: (digits, decimal_exponent) with M- <= V <= M+."""
    e = m_plus[1]
    delta, dist = m_plus[0] - m_minus[0], m_plus[0] - w[0]
    one = 1 << -e
    p1, p2 = m_plus[0] >> -e, m_plus[0] & (one - 1)
    buf, dec = [], 0
    n = len(str(p1))
    pow10 = 10 ** (n - 1)
    while n > 0:
        d, p1 = divmod(p1, pow10)
        buf.append(d)
        n -= 1
        rest = (p1 << -e) + p2
        if rest <= delta:
            _round(buf, dist, delta, rest, pow10 << -e)
            return buf, dec + n
        pow10 //= 10
    m = 0
    while True:
        p2 *= 10
        buf.append(p2 >> -e)
        p2 &= one - 1
        m += 1
        delta, dist = delta * 10, dist * 10
        if p2 <= delta:
            break
    _round(buf, dist, delta, p2, one)
    return buf, dec - m


def _grisu2(value):
    w_minus, w, w_plus = _boundaries(value)
    cf, ce, dec = _cached_power(w_plus[1])
    c = (cf, ce)
    wm, ww, wp = _mul(w_minus, c), _mul(w, c), _mul(w_plus, c)
    digits, exp10 = _digit_gen((wm[0] + 1, wm[1]), ww, (wp[0] - 1, wp[1]))
    return "".join(map(str, digits)), exp10 - dec


def nlohmann_double(x):
    """The text nlohmann::json writes for the double x."""
    x = float(x)
    if not math.isfinite(x):
        return "null"
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    x = abs(x)
    if x == 0:
        return sign + "0.0"
    digits, exp10 = _grisu2(x)
    k, n = len(digits), len(digits) + exp10
    if k <= n <= 15:
        return sign + digits + "0" * (n - k) + ".0"
    if 0 < n <= 15:
        return sign + digits[:n] + "." + digits[n:]
    if -4 < n <= 0:
        return sign + "0." + "0" * (-n) + digits
    body = digits if k == 1 else digits[0] + "." + digits[1:]
    e = n - 1
    return f"{sign}{body}e{'-' if e < 0 else '+'}{abs(e):02d}"


def dump_nlohmann(v, indent=0):
    """nlohmann dump(2) of dicts, lists, str, bool, int, float and None: 2-space indent,
    ": " and ",\\n" separators, keys sorted bytewise (std::map)."""
    pad, inner = " " * indent, " " * (indent + 2)
    if isinstance(v, dict):
        if not v:
            return "{}"
        items = [f"{inner}{json.dumps(k)}: {dump_nlohmann(v[k], indent + 2)}"
                 for k in sorted(v, key=lambda s: s.encode())]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(v, list):
        if not v:
            return "[]"
        return ("[\n" + ",\n".join(inner + dump_nlohmann(e, indent + 2) for e in v) + "\n" +
                pad + "]")
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return nlohmann_double(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    raise TypeError(f"cannot write {type(v).__name__} as nlohmann JSON")
