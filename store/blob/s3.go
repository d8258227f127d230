package blob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// S3Config names a bucket on any S3-compatible store. Credentials come from
// the standard AWS chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY,
// AWS_PROFILE, instance roles, ...).
type S3Config struct {
	Bucket   string
	Endpoint string // empty for AWS itself
	Region   string // default us-east-1
	// PathStyle addresses the bucket as endpoint/bucket/key, which most
	// self-hosted stores (MinIO, versitygw, Ceph) need.
	PathStyle bool
	// PartSize is the multipart part size (default 8 MiB, at least 5 MiB).
	// A writer holds two parts in memory: one filling, one uploading.
	PartSize int64
	// AccessKey and SecretKey, when set, replace the AWS chain (tests).
	AccessKey, SecretKey string
}

const minPartSize = 5 << 20

// S3 keeps objects in a bucket.
type S3 struct {
	client   *s3.Client
	presign  *s3.PresignClient
	bucket   string
	partSize int
}

// NewS3 connects to the bucket and checks that it is reachable.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("blob: S3 bucket is required")
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = 8 << 20
	}
	if cfg.PartSize < minPartSize {
		return nil, fmt.Errorf("blob: S3 part size must be at least %d bytes", minPartSize)
	}
	client, err := NewS3Client(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s := &S3{client: client, presign: s3.NewPresignClient(client), bucket: cfg.Bucket, partSize: int(cfg.PartSize)}
	if _, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.bucket}); err != nil {
		return nil, fmt.Errorf("blob: bucket %s at %s: %w", cfg.Bucket, orAWS(cfg.Endpoint), err)
	}
	return s, nil
}

// NewS3Client is the client NewS3 uses, without touching the bucket.
func NewS3Client(ctx context.Context, cfg S3Config) (*s3.Client, error) {
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	opts := []func(*config.LoadOptions) error{config.WithRegion(cfg.Region),
		// Third-party stores differ in which checksums they accept; send one
		// only where the API requires it.
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired)}
	if cfg.AccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("blob: AWS configuration: %w", err)
	}
	return s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
	}), nil
}

func orAWS(endpoint string) string {
	if endpoint == "" {
		return "AWS"
	}
	return endpoint
}

// Client is the underlying S3 client, for benchmarks that compare with a
// direct PutObject.
func (s *S3) Client() *s3.Client { return s.client }

// Bucket is the bucket's name.
func (s *S3) Bucket() string { return s.bucket }

func (s *S3) Kind() string { return "s3" }

func (s *S3) Create(ctx context.Context, key, contentType string) (Writer, error) {
	if !ValidKey(key) {
		return nil, fmt.Errorf("blob: invalid key %q", key)
	}
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	w := &s3Writer{s: s, ctx: ctx, key: key, contentType: contentType, cur: make([]byte, 0, s.partSize)}
	return w, nil
}

// s3Writer fills one part while the previous one uploads: an object that
// fits in one part is a single PutObject at Commit; a larger one is a
// multipart upload, invisible until CompleteMultipartUpload.
type s3Writer struct {
	s           *S3
	ctx         context.Context
	key         string
	contentType string
	cur         []byte

	uploadID *string
	free     chan []byte // buffers not in use (two in all, one filling)
	full     chan []byte
	done     chan struct{}
	mu       sync.Mutex
	parts    []types.CompletedPart
	err      error
}

func (w *s3Writer) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if err := w.failed(); err != nil {
			return n, err
		}
		k := copy(w.cur[len(w.cur):cap(w.cur)], p)
		w.cur = w.cur[:len(w.cur)+k]
		n += k
		p = p[k:]
		if len(w.cur) == cap(w.cur) {
			if err := w.flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

func (w *s3Writer) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// flush hands the full buffer to the uploader and takes the free one.
func (w *s3Writer) flush() error {
	if w.uploadID == nil {
		out, err := w.s.client.CreateMultipartUpload(w.ctx, &s3.CreateMultipartUploadInput{
			Bucket: &w.s.bucket, Key: &w.key, ContentType: &w.contentType,
		})
		if err != nil {
			return fmt.Errorf("blob: start multipart upload: %w", err)
		}
		w.uploadID = out.UploadId
		w.free = make(chan []byte, 2)
		w.full = make(chan []byte)
		w.done = make(chan struct{})
		w.free <- make([]byte, 0, w.s.partSize)
		go w.uploadParts()
	}
	w.full <- w.cur
	w.cur = <-w.free
	return w.failed()
}

func (w *s3Writer) uploadParts() {
	defer close(w.done)
	num := int32(0)
	for buf := range w.full {
		num++
		if w.failed() == nil {
			out, err := w.s.client.UploadPart(w.ctx, &s3.UploadPartInput{
				Bucket: &w.s.bucket, Key: &w.key, UploadId: w.uploadID,
				PartNumber: aws.Int32(num), Body: bytes.NewReader(buf), ContentLength: aws.Int64(int64(len(buf))),
			})
			w.mu.Lock()
			if err != nil {
				w.err = fmt.Errorf("blob: upload part %d: %w", num, err)
			} else {
				w.parts = append(w.parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num)})
			}
			w.mu.Unlock()
		}
		w.free <- buf[:0]
	}
}

// finishParts stops the uploader and waits for it.
func (w *s3Writer) finishParts() {
	if w.full != nil {
		close(w.full)
		<-w.done
		w.full = nil
	}
}

func (w *s3Writer) Commit(ctx context.Context) error {
	if w.uploadID == nil {
		_, err := w.s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: &w.s.bucket, Key: &w.key, ContentType: &w.contentType,
			Body: bytes.NewReader(w.cur), ContentLength: aws.Int64(int64(len(w.cur))),
		})
		if err != nil {
			return fmt.Errorf("blob: put object: %w", err)
		}
		return nil
	}
	if len(w.cur) > 0 {
		w.full <- w.cur
		w.cur = nil
	}
	w.finishParts()
	if err := w.failed(); err != nil {
		_ = w.Abort(ctx)
		return err
	}
	_, err := w.s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: &w.s.bucket, Key: &w.key, UploadId: w.uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: w.parts},
	})
	if err != nil {
		_ = w.Abort(ctx)
		return fmt.Errorf("blob: complete multipart upload: %w", err)
	}
	return nil
}

func (w *s3Writer) Abort(ctx context.Context) error {
	w.finishParts()
	if w.uploadID == nil {
		return nil
	}
	id := w.uploadID
	w.uploadID = nil
	_, err := w.s.client.AbortMultipartUpload(context.WithoutCancel(ctx), &s3.AbortMultipartUploadInput{
		Bucket: &w.s.bucket, Key: &w.key, UploadId: id,
	})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("blob: abort multipart upload: %w", err)
	}
	return nil
}

func isNotFound(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	var nsu *types.NoSuchUpload
	if errors.As(err, &nsk) || errors.As(err, &nf) || errors.As(err, &nsu) {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "NoSuchKey", "NotFound", "NoSuchUpload":
			return true
		}
	}
	var re interface{ HTTPStatusCode() int }
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound
}

func (s *S3) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if isNotFound(err) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("blob: get object: %w", err)
	}
	return out.Body, nil
}

func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
	if isNotFound(err) {
		return Info{}, ErrNotFound
	}
	if err != nil {
		return Info{}, fmt.Errorf("blob: head object: %w", err)
	}
	return Info{Key: key, Size: aws.ToInt64(out.ContentLength), ModTime: aws.ToTime(out.LastModified)}, nil
}

func (s *S3) Delete(ctx context.Context, key string) error {
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("blob: delete object: %w", err)
	}
	return nil
}

func (s *S3) List(ctx context.Context, prefix string, fn func(Info) error) error {
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("blob: list objects: %w", err)
		}
		for _, o := range page.Contents {
			if err := fn(Info{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified)}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *S3) PresignGet(ctx context.Context, key, disposition, contentType string, ttl time.Duration) (string, error) {
	in := &s3.GetObjectInput{Bucket: &s.bucket, Key: &key}
	if disposition != "" {
		in.ResponseContentDisposition = aws.String(disposition)
	}
	if contentType != "" {
		in.ResponseContentType = aws.String(contentType)
	}
	req, err := s.presign.PresignGetObject(ctx, in, s3.WithPresignExpires(ttl))
	if err != nil {
		return "", fmt.Errorf("blob: presign: %w", err)
	}
	return req.URL, nil
}

func (s *S3) SweepPending(ctx context.Context, olderThan time.Time) (int, error) {
	n := 0
	in := &s3.ListMultipartUploadsInput{Bucket: &s.bucket}
	for {
		out, err := s.client.ListMultipartUploads(ctx, in)
		if err != nil {
			return n, fmt.Errorf("blob: list multipart uploads: %w", err)
		}
		for _, u := range out.Uploads {
			if u.Initiated != nil && !u.Initiated.Before(olderThan) {
				continue
			}
			_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: u.Key, UploadId: u.UploadId})
			if err != nil && !isNotFound(err) {
				return n, fmt.Errorf("blob: abort multipart upload %s: %w", aws.ToString(u.Key), err)
			}
			n++
		}
		if !aws.ToBool(out.IsTruncated) {
			return n, nil
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}

// ContentTypeOf is the media type to store for filename when the client
// sent none: by extension, else application/octet-stream.
func ContentTypeOf(filename string) string {
	if i := strings.LastIndexByte(filename, '.'); i >= 0 {
		if t := mime.TypeByExtension(filename[i:]); t != "" {
			return t
		}
	}
	return "application/octet-stream"
}
