# Fits the tables of src/compile/gelu_avx512.h: Phi(-a) = erfc(a / sqrt 2) / 2 on [0, A] in NI
# intervals, a degree-D polynomial in t = (a - centre) / width, t in [-1/2, 1/2], on each, by
# least squares in relative error on Chebyshev nodes (double), rounded to float; prints the
# coefficient tables (t^0 first) and, on stderr, each interval's max relative error in float
# Horner. Usage: python3 gelu_fit.py NI D A  (the shipped tables: 16 5 6). Needs numpy.
import numpy as np, math, sys
NI=int(sys.argv[1]); D=int(sys.argv[2]); A=float(sys.argv[3])
w=A/NI
Phi=np.vectorize(lambda a: 0.5*math.erfc(a/math.sqrt(2)))  # Phi(-a)
coefs=[];worst=0
for i in range(NI):
    c=(i+0.5)*w
    n=200
    t=np.cos(np.pi*(np.arange(n)+0.5)/n)*0.5  # t in [-0.5,0.5], a = c + t*w
    a=c+t*w; y=Phi(a)
    V=np.vander(t,D+1,increasing=True)
    # relative-error weighted LSQ
    W=1/y
    p,*_=np.linalg.lstsq(V*W[:,None],y*W,rcond=None)
    tt=np.linspace(-0.5,0.5,2001); aa=c+tt*w; yy=Phi(aa)
    # evaluate in float32 horner
    pf=p.astype(np.float32); tf=tt.astype(np.float32)
    r=np.full_like(tf,pf[D])
    for k in range(D-1,-1,-1): r=(r*tf+pf[k]).astype(np.float32)
    rel=np.max(np.abs(r-yy)/yy); worst=max(worst,rel)
    print(f"# i={i} a=[{c-w/2:.3f},{c+w/2:.3f}] rel={rel:.2e} absgelu={np.max(np.abs(r-yy)*aa):.2e}",file=sys.stderr)
    coefs.append(pf)
print("worst",worst,file=sys.stderr)
C=np.array(coefs)
for k in range(D+1):
    print("static const float mg_gelu_c%d[%d] = {%s};"%(k,NI,", ".join("%.9g"%v+"f" for v in C[:,k])))
